"""texpr_ad: tensor-expression automatic differentiation with generated kernels."""
from . import te

__version__ = "0.1.0"
__all__ = ["te"]

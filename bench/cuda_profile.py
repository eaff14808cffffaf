"""`python -m bench.cuda_profile`: where a texpr_ad.torch op's per-call time goes on CUDA tensors,
on a GPU: per-call times of the forward and of forward + backward on 1000 floats, then cProfile
of 200 training steps by own time and by cumulative time (bench/gpu_session.sh runs it).
bench.cuda_overhead measured 575 us forward and 1926 us forward + backward on an H100 against
torch's 25 and 119; this says which Python layer spends them."""
import cProfile, pstats, io, time
import torch
import texpr_ad.torch as tt
from texpr_ad import te

def axpy(x, w):
    return te.compute(x.shape, lambda i: x[i] * w[i] + 1.0, name="y")

op = tt.custom_op(axpy, name="gpu_profile_axpy")
x = torch.randn(1000, device="cuda", requires_grad=True)
w = torch.randn(1000, device="cuda")
def step():
    op(x, w).sum().backward()
def fwd():
    with torch.no_grad():
        op(x, w)
for _ in range(30):
    step(); fwd()
torch.cuda.synchronize()
for name, f in (("fwd", fwd), ("step", step)):
    t = time.perf_counter()
    for _ in range(200):
        f()
    torch.cuda.synchronize()
    print(f"{name}: {(time.perf_counter() - t) / 200 * 1e6:.1f} us per call")
pr = cProfile.Profile()
pr.enable()
for _ in range(200):
    step()
torch.cuda.synchronize()
pr.disable()
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
print(s.getvalue()[:9000])
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(40)
print(s.getvalue()[:9000])

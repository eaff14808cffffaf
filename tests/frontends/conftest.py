"""Shared fixtures of the front-end tests."""
import pytest


@pytest.fixture
def x64():
    """JAX with 64-bit types enabled for the test (the JAX test modules use it for all)."""
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        yield

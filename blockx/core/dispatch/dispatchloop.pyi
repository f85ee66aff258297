# Type stub of the compiled module blockx.core.dispatch.dispatchloop: its public interface is that
# of its pure-Python twin, blockx.core.dispatch.dispatchloop_py (the same tests run against both).
from blockx.core.dispatch.dispatchloop_py import *  # noqa: F401,F403
from blockx.core.dispatch.dispatchloop_py import join as join  # public, outside the twin's __all__

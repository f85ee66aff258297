# Type stub of the compiled module blockx._fast.framecheck: its public interface is that
# of its pure-Python twin, blockx._fast.framecheck_py (the same tests run against both).
from blockx._fast.framecheck_py import *  # noqa: F401,F403

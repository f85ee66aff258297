# Type stub of the compiled module blockx._fast.writenotice: its public interface is that
# of its pure-Python twin, blockx._fast.writenotice_py (the same tests run against both).
from blockx._fast.writenotice_py import *  # noqa: F401,F403

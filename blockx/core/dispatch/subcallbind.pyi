# Type stub of the compiled module blockx.core.dispatch.subcallbind: its public interface is that
# of its pure-Python twin, blockx.core.dispatch.subcallbind_py (the same tests run against both).
from blockx.core.dispatch.subcallbind_py import *  # noqa: F401,F403

"""PrefixWatch lives in blockx.etcd.prefix_watch (the client's registry view uses it
too); this module keeps the Worker-side import path."""
from blockx.etcd.prefix_watch import PrefixWatch, etcd_target, prefix_range_end

__all__ = ["PrefixWatch", "etcd_target", "prefix_range_end"]

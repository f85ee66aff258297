from blockx.etcd.prefix_watch import prefix_range_end


def test_prefix_range_end():
    assert prefix_range_end(b"/blockx/workers/") == b"/blockx/workers0"
    assert prefix_range_end(b"a\xff") == b"b"
    assert prefix_range_end(b"\xff\xff") == b"\x00"

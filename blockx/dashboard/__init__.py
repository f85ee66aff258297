"""blockx.dashboard: the fleet in a browser (`blockx dashboard`, or one Worker's own
pages with dashboardListen).

An aiohttp server that reads the fleet from etcd (or a list of addresses) and
each Worker over its gRPC API, with the token the person logged in with, and
serves a small single-page UI from this package's static/ directory (no CDN, no
inline script). One concept per module: app (routes), sessions (login sessions),
guard (the CSRF, Origin and Host checks), headers (security headers), clients
(one WorkerClient per token and worker), fleet (the registry and the status
poller), history (rates and sparklines), timeline (a trace's lanes), views (the
JSON of tasks and results), server (the listening socket and its TLS)."""

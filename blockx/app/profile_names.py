"""The names of the deployment profiles, for `blockx serve --profile`: the CLI
offers them without importing the profiles themselves (their builders and
plugins need the Worker's dependencies, which a client install does not have)."""

PROFILE_NAMES = ("block", "bundle", "dev")

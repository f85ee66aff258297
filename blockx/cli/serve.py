"""`blockx serve`: load the profile and the configuration (defaults -> profile ->
WORKER_CONFIG JSON file or --config -> environment), refuse an invalid one with
exit 2, and run the Worker (blockx.app.run) until SIGTERM / SIGINT. Needs the
`worker` extra; without it, says what to install. What it prints (the config,
its problems) never shows a secret (blockx.redaction); a STATE_DIR found unsafe
when the Worker starts is exit 2 too, with the path and the fix."""

from __future__ import annotations

import argparse
import sys

from blockx.cli.exit import EXIT_OK, EXIT_USAGE
from blockx.redaction import redact_text


def cmd_serve(ns: argparse.Namespace) -> int:
    from blockx.extras import MissingExtra, require

    try:
        require("worker", "`blockx serve`")
    except MissingExtra as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from blockx.app.config import ConfigError, load_config
    from blockx.app.profile import ProfileError, get_profile

    try:
        profile = get_profile(ns.profile)
        profile.validate()
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        cfg = load_config(profile, config_path=ns.config)
    except ConfigError as exc:
        print(f"error: {redact_text(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    problems = cfg.violations(profile)
    if ns.print_config:
        print(cfg.to_json())            # its secrets hidden (blockx.app.config_fields.to_dict)
    if problems:
        # a problem may quote the URL it is about: never with its password or key
        print(f"error: {redact_text(str(ConfigError(problems)))}", file=sys.stderr)
        return EXIT_USAGE
    if ns.print_config:
        return EXIT_OK
    from blockx.app.run import serve
    from blockx.app.state_dir import UnsafePath

    try:
        return serve(cfg, profile)
    except UnsafePath as exc:       # STATE_DIR or its token, found unsafe when used (after the check above)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE

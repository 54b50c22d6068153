"""A runner's whole command line, parsed by the installed vLLM's own argument parser before it starts.

``vllm serve`` and ``python -m vllm.entrypoints.openai.api_server`` build their parser as
``make_arg_parser(FlexibleArgumentParser())`` (``vllm.entrypoints.launchers.cli_args`` in vLLM 0.32, with
``vllm.utils.argparse_utils.FlexibleArgumentParser``). Parsing each runner's argv with that very parser
catches what vLLM itself would refuse (an unknown flag, a value outside a flag's choices, a number that is
not one) with the offending name, instead of a runner process that exits during start-up. On top of vLLM's
rules, every ``--flag`` must be spelled out in full: argparse would take ``--max-num-seq`` as an
abbreviation of ``--max-num-seqs``, which is how a typo survives a vLLM upgrade that adds a second match.

Importing vLLM loads torch (about 10 s and 1 GB), so the launcher runs this module in a child process with
the runner's own interpreter (``python -m service.runners.vllm_args``, JSON on stdin and stdout): the vLLM
that checks is the vLLM that will run, and torch stays out of ragserve's process.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import json
import sys
from typing import Any, NoReturn

EXIT_NO_VLLM = 3


class ArgsRefused(ValueError):
    pass


def build_parser() -> argparse.ArgumentParser:
    """vLLM's own ``serve`` parser, made to raise instead of printing usage and exiting."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    class RaisingParser(FlexibleArgumentParser):
        def error(self, message: str) -> NoReturn:
            raise ArgsRefused(message)

        def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
            raise ArgsRefused(message or f"the parser exited ({status})")

    return make_arg_parser(RaisingParser(prog="vllm serve"))


def check(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """What vLLM's parser says against ``argv`` (the arguments after the module), or None when it accepts it."""
    from service.config.engine import option_name

    known = set(parser._option_string_actions)  # noqa: SLF001 - argparse keeps its option table here
    for arg in argv:
        name = option_name(arg)
        if name is not None and name not in known:
            close = difflib.get_close_matches(name, [k for k in known if k.startswith("--")], n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            return f"unrecognized argument: {arg.split('=', 1)[0]}{hint}"
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            namespace = parser.parse_args(argv)
    except (ArgsRefused, ValueError, TypeError) as exc:
        return str(exc)
    if getattr(namespace, "model_tag", None) is not None:
        return f"stray positional argument {namespace.model_tag!r} (vLLM would take it as the model)"
    return None


def check_all(argvs: dict[str, list[str]]) -> dict[str, Any]:
    """``{runner: argv}`` -> ``{"vllm": version, "refused": {runner: reason}}``."""
    import vllm

    parser = build_parser()
    refused = {name: reason for name, argv in argvs.items() if (reason := check(parser, argv)) is not None}
    return {"vllm": vllm.__version__, "refused": refused}


def main() -> None:
    argvs = json.load(sys.stdin)
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        print(json.dumps({"error": f"vLLM is not importable here: {exc}"}))
        raise SystemExit(EXIT_NO_VLLM) from None
    with contextlib.redirect_stdout(sys.stderr):  # vLLM's import-time chatter must not corrupt the answer
        result = check_all(argvs)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

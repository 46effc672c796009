"""How a torchrun rank ends: ``zoo.cli.console_main`` hands a process that joined a process group to
``zoo.run.launch.end_rank``, which runs the ``atexit`` hooks and leaves without the interpreter's teardown (where gloo's
threads, freeing a collective's tensors, aborted one exit in six); any other process ends as usual."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from helpers import free_port

SCRIPT = textwrap.dedent('''
    import atexit, os, sys, threading
    from easydict import EasyDict
    import zoo.cli
    from zoo.run import launch

    # Run by the interpreter's teardown (``threading._shutdown``, before the atexit hooks), and by nothing else.
    threading._register_atexit(lambda: os.write(1, b"teardown\\n"))
    atexit.register(lambda: os.write(1, b"hook\\n"))

    def main():
        if sys.argv[1] == "join":
            os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                              MASTER_PORT=sys.argv[2])
            rank = launch.Processes(EasyDict(), None, False, lambda *a: {}).join_group("gloo", 60.0)
            atexit.register(lambda: os.write(1, f"group {launch.dist.is_initialized()}\\n".encode()))
            print("rank", rank)
        return 3

    zoo.cli.main = main
    zoo.cli.console_main()
''')


def _run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    script = tmp_path / "rank.py"
    script.write_text(SCRIPT)
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120)


def test_a_rank_that_joined_a_group_runs_its_hooks_then_exits_with_its_code_without_a_teardown(tmp_path):
    done = _run(tmp_path, "join", str(free_port()))
    assert done.returncode == 3, done.stderr
    # zoo's hook destroyed the group before the others ran; printed output was flushed; no teardown followed.
    assert done.stdout.split("\n") == ["rank 0", "group False", "hook", ""], done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_any_other_command_ends_through_the_interpreters_teardown(tmp_path):
    done = _run(tmp_path, "alone")
    assert done.returncode == 3, done.stderr
    assert done.stdout.split("\n") == ["teardown", "hook", ""], done.stdout + done.stderr

"""The gpufleet entry point: user data prints verbatim, and a command's exit code reaches the shell."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _gpufleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", *args], capture_output=True, text=True, timeout=120
    )


def test_an_error_naming_a_path_with_brackets_prints_the_path_verbatim(tmp_path: Path) -> None:
    missing = tmp_path / "[bold]jobs:ab:.yaml"
    done = _gpufleet("scenario", "run", str(missing))
    assert done.returncode != 0
    assert "[bold]jobs:ab:.yaml" in done.stderr


def test_agent_inspect_prints_pci_bus_ids_verbatim() -> None:
    done = _gpufleet("agent", "inspect", "--profile", "hgx-h100")
    assert done.returncode == 0, done.stderr
    assert "00000000:AB:00.0" in done.stdout


def test_a_failing_scenario_makes_the_command_exit_1(tmp_path: Path) -> None:
    scenario = tmp_path / "wrong.yaml"
    scenario.write_text(
        "apiVersion: gpufleet.io/v1alpha1\n"
        "kind: Scenario\n"
        "metadata: {name: wrong-expectation}\n"
        "spec:\n"
        "  nodes: [{name: n1, gpus: 8, gpuModel: H100-80GB, cpu: 96, memory: 1Ti}]\n"
        "  submit: [{name: big, podSets: [{name: main, count: 1, gpus: 16}]}]\n"
        "  expect: {admitted: [big]}\n"
    )
    done = _gpufleet("scenario", "run", str(scenario))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "big" in done.stdout


def test_help_shows_bracketed_defaults_and_environment_variables() -> None:
    done = _gpufleet("apply", "--help")
    assert done.returncode == 0, done.stderr
    assert "GPUFLEET_SERVER" in done.stdout
    assert "GPUFLEET_STATE" in done.stdout


def test_a_bad_option_value_is_a_usage_error_not_a_traceback() -> None:
    done = _gpufleet("bench", "admission", "--queues", "many")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "--queues" in done.stderr


def test_the_kube_daemons_start_without_importing_the_other_areas() -> None:
    """`gpufleet kube scheduler` and `operator` start without the embedded server, the agent and the
    benchmarks; every other command line still sees every command."""
    probe = (
        "import sys\n"
        "from gpufleet.cli.main import main\n"
        "sys.argv = ['gpufleet', *sys.argv[1:]]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in ('fastapi', 'gpufleet.server.app', 'gpufleet.cli.agent', 'grpc') "
        "if m in sys.modules))\n"
    )
    kube = subprocess.run([sys.executable, "-c", probe, "kube", "--help"], capture_output=True, text=True)
    assert kube.returncode == 0 and "scheduler" in kube.stdout and kube.stdout.rstrip().endswith("[]")
    top = _gpufleet("--help")
    assert top.returncode == 0 and all(c in top.stdout for c in ("kube", "up", "agent", "bench"))


def test_a_sole_area_alone_registers_exactly_its_own_command() -> None:
    """A command line naming a sole area builds the app with that area only: the area must register
    that one command (or group), and no other area may register it, or that command line would reach
    another command than the full app does."""
    import typer

    from gpufleet.cli.main import AREAS, SOLE_AREAS, _areas_for, build_app

    for area in SOLE_AREAS:
        assert _areas_for(["gpufleet", area, "--help"]) == (area,)
        alone = typer.main.get_command(build_app((area,)))
        assert sorted(alone.commands) == [area], area  # type: ignore[attr-defined]
        others = typer.main.get_command(build_app(tuple(a for a in AREAS if a != area)))
        assert area not in others.commands, area  # type: ignore[attr-defined]
    assert _areas_for(["gpufleet", "get", "pods"]) == AREAS
    assert _areas_for(["gpufleet", "--help"]) == AREAS
    assert _areas_for(["gpufleet"]) == AREAS


def test_simulate_starts_without_importing_the_server_and_the_kubernetes_client() -> None:
    probe = (
        "import sys\n"
        "from gpufleet.cli.main import main\n"
        "sys.argv = ['gpufleet', 'simulate', '--help']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('fastapi', 'kubernetes', 'gpufleet.cli.agent', 'grpc')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0 and "--trace" in done.stdout and done.stdout.rstrip().endswith("[]")


def test_at_exit_the_heap_is_left_to_the_operating_system() -> None:
    """The command's objects are frozen out of the collector's reach before the interpreter's last
    collection, once however often main() ran."""
    probe = (
        "import atexit, gc, sys\n"
        "freeze = gc.freeze\n"
        "gc.freeze = lambda: (print('freeze', flush=True), freeze())\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0, flush=True))\n"
        "from gpufleet.cli.main import main\n"
        "for _ in range(2):\n"
        "    sys.argv = ['gpufleet', 'gpu-models']\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit:\n"
        "        pass\n"
        "    print('ran', flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    tail = [line for line in done.stdout.splitlines() if line in ("ran", "freeze", "frozen True")]
    assert tail == ["ran", "ran", "freeze", "frozen True"]


def test_a_ctrl_c_swallowed_by_a_weakref_callback_ends_the_command_without_a_traceback() -> None:
    """Python cannot raise an exception out of a weakref callback; a Ctrl-C arriving in one used to print
    "Exception ignored ... Traceback" and let the command run on."""
    probe = (
        "import functools, sys, time, weakref\n"
        "from gpufleet.cli import main\n"
        "sys.unraisablehook = functools.partial(main._interrupt_again, sys.unraisablehook)\n"
        "class Held: pass\n"
        "def interrupted(ref):\n"
        "    raise KeyboardInterrupt\n"
        "held = Held()\n"
        "watch = weakref.ref(held, interrupted)\n"
        "try:\n"
        "    del held\n"
        "    time.sleep(30)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n"
        "    sys.exit(130)\n"
        "print('ran on')\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (130, "interrupted"), done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr

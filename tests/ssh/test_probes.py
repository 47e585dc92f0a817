"""Probes of SSH hosts (hosts.backends.ssh.probes): real nvidia-smi outputs of an H100 (idle and
busy, tests/fixtures/nvidia-smi/), this machine's own /proc files, and PROBE_SCRIPT run here
under sh with the fake nvidia-smi (tests/bin/nvidia-smi) first on PATH, and without it.

No network, no database: fast.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from hosts.backends.ssh import probes
from hosts.backends.ssh.probes import CpuTimes, GpuUse, NotEnoughGpus

TESTS = Path(__file__).resolve().parents[1]
FAKE_BIN = TESTS / "bin"
FIXTURES = TESTS / "fixtures" / "nvidia-smi"
if not FIXTURES.is_dir():  # the real outputs are the point of these tests: never skip them
    raise RuntimeError(f"nvidia-smi fixtures missing: {FIXTURES}")

H100 = "NVIDIA H100 80GB HBM3"
UUID = "GPU-11111111-2222-3333-4444-555555555555"
BUSY_MEMORY_PERCENT = round(22131 / 81559 * 100, 1)  # 27.1


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def fake_env(tmp_path: Path, path: str, **fake: str) -> dict[str, str]:
    """An environment for the fake: only the FAKE_NVIDIA_SMI_* given, HOME without a config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVIDIA_SMI_")}
    env.update(PATH=path, HOME=str(tmp_path))
    env.update({f"FAKE_NVIDIA_SMI_{k.upper()}": v for k, v in fake.items()})
    return env


def run_probe(tmp_path: Path, path: str, **fake: str) -> str:
    env = fake_env(tmp_path, path, **fake)
    done = subprocess.run(
        probes.PROBE_COMMAND, shell=True, env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def fake_smi(tmp_path: Path, *args: str, **fake: str) -> subprocess.CompletedProcess[str]:
    env = fake_env(tmp_path, os.environ["PATH"], **fake)
    return subprocess.run(
        [str(FAKE_BIN / "nvidia-smi"), *args], env=env, capture_output=True, text=True, timeout=30
    )


def gpus_of(*states: str) -> list[GpuUse]:
    """GPUs in these states, numbered 0.. (as the fake renumbers several)."""
    lines = [fixture(f"{s}-query-gpu.csv").strip() for s in states]
    return probes.parse_gpus("\n".join(re.sub(r"^0,", f"{i},", ln) for i, ln in enumerate(lines)))


# --- nvidia-smi --------------------------------------------------------------------------------
def test_idle_h100():
    [gpu] = probes.parse_gpus(fixture("idle-query-gpu.csv"))
    assert gpu == GpuUse(0, UUID, H100, 0.0, 0.0, 0, 81559, 31.0, 106.27)
    assert gpu.memory_percent == 0.0 and gpu.busy_percent == 0.0


def test_busy_h100_agrees_with_the_plain_table():
    [gpu] = probes.parse_gpus(fixture("busy-query-gpu.csv"))
    assert (gpu.utilization_percent, gpu.memory_activity_percent) == (14.0, 1.0)
    assert (gpu.memory_used_mib, gpu.memory_total_mib, gpu.temperature_c) == (22131, 81559, 39.0)
    assert gpu.memory_percent == BUSY_MEMORY_PERCENT
    assert gpu.busy_percent == BUSY_MEMORY_PERCENT  # memory in use weighs more than 14 %
    # The same memory figures as nvidia-smi's own table of that moment.
    used, total = re.search(r"(\d+)MiB /\s+(\d+)MiB", fixture("busy-nvidia-smi.txt")).groups()
    assert (int(used), int(total)) == (gpu.memory_used_mib, gpu.memory_total_mib)


def test_the_query_is_the_one_the_fixtures_answer():
    readme = (FIXTURES.parent / "README.md").read_text()
    assert f"`{probes.GPU_QUERY}`" in readme
    assert len(fixture("busy-query-gpu.csv").split(",")) == len(probes.GPU_FIELDS)


def test_header_and_units_variant():
    [gpu] = probes.parse_gpus(fixture("idle-query-gpu-with-header.csv"))
    assert (gpu.index, gpu.utilization_percent, gpu.memory_used_mib) == (0, 0.0, 0)
    assert (gpu.memory_total_mib, gpu.uuid, gpu.temperature_c) == (81559, "", None)


def test_unsupported_figures_are_unknown_not_zero():
    text = "\n  \n3, GPU-abc, A100 MIG, [N/A], [Not Supported], 20000, 40000, N/A, [N/A]\n\n"
    [gpu] = probes.parse_gpus(text)
    assert gpu.index == 3 and gpu.utilization_percent is None
    assert gpu.memory_activity_percent is None and gpu.temperature_c is None
    assert gpu.power_draw_w is None
    assert gpu.busy_percent == 50.0  # only what is known counts
    blind = probes.parse_gpus("0, GPU-x, X, [N/A], [N/A], [N/A], [N/A], [N/A], [N/A]")[0]
    assert blind.memory_percent is None and blind.busy_percent == 0.0


def test_a_name_with_a_comma_is_kept_whole():
    [gpu] = probes.parse_gpus("1, GPU-x, Tesla, rev B, 5, 0, 10, 100, 30, 50.5")
    assert (gpu.index, gpu.name, gpu.utilization_percent, gpu.power_draw_w) == (
        1,
        "Tesla, rev B",
        5.0,
        50.5,
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0, GPU-x, H100, 1, 2", "has 5 fields, expected 9"),
        ("0, GPU-x, H100, busy, 0, 0, 81559, 31, 106.27", "not a number: 'busy'"),
        ("[N/A], GPU-x, H100, 0, 0, 0, 81559, 31, 106.27", "malformed nvidia-smi line"),
    ],
)
def test_malformed_gpu_lines_are_named(text, message):
    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        probes.parse_gpus(fixture("idle-query-gpu.csv") + text + "\n")  # after a good line
    assert text in str(caught.value)
    with pytest.raises(ValueError, match="header without an index column: 'name, memory"):
        probes.parse_gpus("name, memory.used [MiB]\nH100, 0 MiB\n")


def test_gpu_use_survives_json():
    gpus = gpus_of("idle", "busy")
    stored = json.loads(json.dumps([g.as_dict() for g in gpus]))
    assert stored[1]["memory_percent"] == BUSY_MEMORY_PERCENT
    assert [GpuUse.from_dict(d) for d in stored] == gpus


# --- the fake nvidia-smi -----------------------------------------------------------------------
def test_fake_prints_the_fixture_byte_for_byte(tmp_path):
    args = probes.GPU_QUERY.split()[1:]
    for state in ("idle", "busy"):
        out = fake_smi(tmp_path, *args, state=state)
        assert (out.returncode, out.stdout) == (0, fixture(f"{state}-query-gpu.csv"))
    assert fake_smi(tmp_path).stdout == fixture("idle-nvidia-smi.txt")
    assert fake_smi(tmp_path, "-q", "-x").stdout == fixture("idle-nvidia-smi-q.xml")


def test_fake_renumbers_several_gpus(tmp_path):
    out = fake_smi(tmp_path, *probes.GPU_QUERY.split()[1:], state="idle,busy,idle,idle")
    gpus = probes.parse_gpus(out.stdout)
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert len({g.uuid for g in gpus}) == 4 and gpus[0].uuid == UUID
    assert [g.busy_percent for g in gpus] == [0.0, BUSY_MEMORY_PERCENT, 0.0, 0.0]
    same = fake_smi(tmp_path, *probes.GPU_QUERY.split()[1:], state="busy", gpus="3")
    assert [g.memory_used_mib for g in probes.parse_gpus(same.stdout)] == [22131] * 3
    query = "--query-gpu=index,utilization.gpu,memory.used,memory.total"
    header = fake_smi(tmp_path, query, "--format=csv", gpus="2")
    assert [g.index for g in probes.parse_gpus(header.stdout)] == [0, 1]


def test_fake_fails_loudly(tmp_path):
    args = probes.GPU_QUERY.split()[1:]
    missing = fake_smi(tmp_path, *args, fixtures=str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "fixture directory" in missing.stderr
    assert fake_smi(tmp_path, "-L").returncode == 2  # no fixture: no made-up answer
    assert fake_smi(tmp_path, *args, state="warm").returncode == 2
    assert "no fixture busy-nvidia-smi-q.xml" in fake_smi(tmp_path, "-q", "-x", state="busy").stderr


def test_fake_reads_its_config_file(tmp_path):
    (tmp_path / ".fake-nvidia-smi").write_text("FAKE_NVIDIA_SMI_STATE=busy,idle\n")
    out = fake_smi(tmp_path, *probes.GPU_QUERY.split()[1:])
    assert [g.busy_percent for g in probes.parse_gpus(out.stdout)] == [BUSY_MEMORY_PERCENT, 0.0]
    out = fake_smi(tmp_path, *probes.GPU_QUERY.split()[1:], state="idle")  # environment wins
    assert len(probes.parse_gpus(out.stdout)) == 1


# --- cpu, memory, load -------------------------------------------------------------------------
def test_cpu_percent_from_counters():
    before = probes.cpu_times("cpu  100 0 100 800 0 0 0 0 7 7\ncpu0 1 2 3 4\n")
    after = probes.cpu_times("cpu  200 0 150 850 50 0 0 0 90 9")  # guest: already in user
    assert (before, after) == (CpuTimes(1000, 800), CpuTimes(1250, 900))
    assert probes.cpu_percent(before, after) == 60.0  # 150 busy of 250
    assert probes.cpu_percent(after, after) == 0.0
    assert probes.cpu_percent(after, before) == 0.0  # counters reset: no figure, not negative
    assert probes.cpu_times("cpu 10 0 10 80") == CpuTimes(100, 80)  # old kernels: 4 counters


def test_cpu_percent_of_this_machine_while_it_works():
    before = probes.cpu_times(Path("/proc/stat").read_text())
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:  # one core busy: at least a share of the machine
        pass
    after = probes.cpu_times(Path("/proc/stat").read_text())
    assert after.total > before.total and after.idle >= before.idle
    ncpu = len(re.findall(r"^cpu\d", Path("/proc/stat").read_text(), re.M))
    assert 100 / ncpu / 2 <= probes.cpu_percent(before, after) <= 100


@pytest.mark.parametrize(
    "text",
    ["", "intr 1 2 3", "cpu  1 2 x 4", "cpu  1 2 3"],
    ids=["empty", "no-cpu", "nan", "short"],
)
def test_malformed_proc_stat(text):
    with pytest.raises(ValueError, match="/proc/stat"):
        probes.cpu_times(text)


def test_memory_of_this_machine():
    text = Path("/proc/meminfo").read_text()
    kb = {m[1]: int(m[2]) for m in re.finditer(r"^(\w+):\s+(\d+)", text, re.M)}
    expected = (kb["MemTotal"] - kb["MemAvailable"]) / kb["MemTotal"] * 100
    assert probes.memory_percent(text) == round(expected, 1)
    assert 0 < probes.memory_percent(text) < 100


def test_memory_without_memavailable_and_malformed():
    old_kernel = "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 100 kB\nCached: 300 kB\n"
    assert probes.memory_percent(old_kernel) == 50.0
    with pytest.raises(ValueError, match="MemTotal"):
        probes.memory_percent("MemFree: 100 kB\n")


def test_load_average():
    assert probes.load_average("0.52 1.07 3.82 3/196 8568\n") == (0.52, 1.07, 3.82)
    here = probes.load_average(Path("/proc/loadavg").read_text())
    assert len(here) == 3 and all(v >= 0 for v in here)
    with pytest.raises(ValueError, match="malformed /proc/loadavg: '0.5 zero'"):
        probes.load_average("0.5 zero")


# --- idle score and GPU placement --------------------------------------------------------------
def test_idle_score_weights():
    assert probes.idle_score(0, 0, 0) == 1.0
    assert probes.idle_score(100, 100, 100) == 0.0
    assert probes.idle_score(100, 0, 0) == 0.6  # cpu 0.4
    assert probes.idle_score(0, 100, 0) == 0.6  # memory 0.4
    assert probes.idle_score(0, 0, 100) == 0.8  # gpu 0.2
    assert probes.idle_score(50, 50, 50) == 0.5
    assert probes.idle_score(100, 0, None) == 0.5  # no GPUs: cpu and memory, 0.5 each
    assert probes.idle_score(0, 0, None) == 1.0
    assert probes.idle_score(250, -5, 0) == 0.6  # figures out of range are clamped


def test_gpu_busy_percent():
    idle_busy = gpus_of("idle", "busy")
    assert probes.gpu_busy_percent([]) is None
    assert probes.gpu_busy_percent(idle_busy) == pytest.approx(BUSY_MEMORY_PERCENT / 2, abs=0.06)
    # A GPU Sandhub gave a sandbox is taken, even while that sandbox idles.
    taken = probes.gpu_busy_percent(idle_busy, {0: 1})
    assert taken == pytest.approx((100 + BUSY_MEMORY_PERCENT) / 2, abs=0.06)


def test_pick_gpus_prefers_unassigned_then_idle():
    gpus = gpus_of("idle", "busy", "idle", "idle")
    assigned = {0: 1, 9: 4}  # 9: a GPU the host no longer has
    assert probes.pick_gpus(gpus, assigned, 1) == [2]
    assert probes.pick_gpus(gpus, assigned, 2) == [2, 3]
    assert probes.pick_gpus(gpus, assigned, 3) == [1, 2, 3]  # busy before assigned
    assert probes.pick_gpus(gpus, assigned, 4) == [0, 1, 2, 3]
    assert probes.pick_gpus(gpus, {}, 1) == [0]  # ties: the lowest index
    assert probes.pick_gpus(gpus, {0: 2, 1: 1, 2: 1, 3: 1}, 1) == [2]
    assert probes.pick_gpus(gpus, {}, 0) == []


def test_pick_gpus_refuses_too_many():
    with pytest.raises(NotEnoughGpus, match=r"^9 GPUs asked, but the host has only 4$"):
        probes.pick_gpus(gpus_of("idle", "idle", "idle", "idle"), {}, 9)
    with pytest.raises(NotEnoughGpus, match="1 GPU asked, but the host has only 0"):
        probes.pick_gpus([], {}, 1)
    assert issubclass(NotEnoughGpus, ValueError)
    with pytest.raises(ValueError, match="negative"):
        probes.pick_gpus([], {}, -1)


def test_gpu_pick_cost_ranks_hosts():
    idle_host, busy_host = gpus_of("idle", "idle"), gpus_of("busy", "busy")
    assert probes.gpu_pick_cost(idle_host, {}, 1) == (0, 0.0)
    assert probes.gpu_pick_cost(busy_host, {}, 2) == (0, 2 * BUSY_MEMORY_PERCENT)
    # What Sandhub assigned decides before use does.
    assert probes.gpu_pick_cost(idle_host, {0: 1, 1: 1}, 1) > probes.gpu_pick_cost(busy_host, {}, 1)


def test_cuda_visible_devices():
    assert probes.cuda_visible_devices([0, 2]) == "0,2"
    assert probes.cuda_visible_devices([]) == ""  # a sandbox given no GPU sees none
    assert probes.gpu_environment([3]) == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": "3",
    }
    for bad in ([-1], ["0"], [True]):
        with pytest.raises(ValueError, match="GPU indices"):
            probes.cuda_visible_devices(bad)


# --- PROBE_SCRIPT, run here --------------------------------------------------------------------
def test_probe_script_with_fake_gpus(tmp_path):
    path = f"{FAKE_BIN}:{os.environ['PATH']}"
    started = time.monotonic()
    out = run_probe(tmp_path, path, state="idle,busy")
    elapsed = time.monotonic() - started
    sample = probes.parse_probe_output("Welcome to a login banner\n" + out)
    assert elapsed >= probes.PROBE_INTERVAL
    assert [g.index for g in sample.gpus] == [0, 1] and sample.gpu_error == ""
    assert sample.gpu_percent == pytest.approx(BUSY_MEMORY_PERCENT / 2, abs=0.06)
    assert 0 <= sample.cpu_percent <= 100
    here = probes.memory_percent(Path("/proc/meminfo").read_text())
    assert abs(sample.memory_percent - here) < 10
    assert sample.cpu_count == len(re.findall(r"^cpu\d", Path("/proc/stat").read_text(), re.M))
    assert sample.memory_total_mib > 0 and all(v >= 0 for v in sample.load)
    assert sample.idle_score == probes.idle_score(
        sample.cpu_percent, sample.memory_percent, sample.gpu_percent
    )
    details = json.loads(json.dumps(sample.details()))
    assert details["gpu_count"] == 2 and details["gpus"][1]["busy_percent"] == BUSY_MEMORY_PERCENT
    # What Sandhub assigned counts in the host's figure.
    assert probes.parse_probe_output(out, {1: 1}).gpu_percent == 50.0


def test_probe_script_without_nvidia_smi(tmp_path):
    path = "/usr/bin:/bin"
    if shutil.which("nvidia-smi", path=path):
        pytest.skip("this machine has a real nvidia-smi")
    sample = probes.parse_probe_output(run_probe(tmp_path, path))
    assert (sample.gpus, sample.gpu_percent, sample.gpu_error) == ((), None, "")
    assert sample.idle_score == probes.idle_score(sample.cpu_percent, sample.memory_percent)


@pytest.mark.parametrize(
    ("fake", "error"),
    [
        ({"fail": "1"}, "nvidia-smi failed (exit 9): NVIDIA-SMI has failed because"),
        ({"gpus": "0"}, "nvidia-smi failed (exit 6): No devices were found"),
    ],
)
def test_probe_script_when_nvidia_smi_fails(tmp_path, fake, error):
    out = run_probe(tmp_path, f"{FAKE_BIN}:{os.environ['PATH']}", **fake)
    sample = probes.parse_probe_output(out)  # cpu and memory still count
    assert sample.gpu_error.startswith(error)
    assert (sample.gpus, sample.gpu_percent) == ((), None)


def test_probe_output_errors(tmp_path):
    out = run_probe(tmp_path, f"{FAKE_BIN}:{os.environ['PATH']}")
    with pytest.raises(ValueError, match="no 'end' section"):
        probes.parse_probe_output(out.split("@@sandhub-probe end@@")[0])  # cut short
    without_memory = re.sub(r"@@sandhub-probe meminfo@@.*?(?=@@)", "", out, flags=re.S)
    with pytest.raises(ValueError, match="no 'meminfo' section"):
        probes.parse_probe_output(without_memory)
    garbled = out.replace("NVIDIA H100 80GB HBM3, ", "")  # 8 fields: the GPUs cannot be read
    sample = probes.parse_probe_output(garbled)
    assert sample.gpus == () and "expected 9" in sample.gpu_error
    timed_out = re.sub(r"(gpu-exit@@\n)0", r"\g<1>124", out)
    assert "timed out" in probes.parse_probe_output(timed_out).gpu_error

import json
import re

import pytest
import yaml
from conftest import TINY, strip_clock

from legolab.cli import main
from legolab.errors import LegoError
from legolab.io import read_jsonl
from legolab.reproduce import figures
from legolab.reproduce.figures import FAILS, HOLDS, UNTESTABLE, better
from legolab.reproduce.report import SCALE_NOTES, count_machines, report_seeds, run_machines
from legolab.training.step import machine_name

VERDICTS = (HOLDS, FAILS, UNTESTABLE)


def write_configs(root, n=12):
    d = root / "configs" / "cpu"
    d.mkdir(parents=True)
    for stem, arch in (("bert", "bert"), ("albert", "albert")):
        data = {**TINY, "name": f"cpu-{stem}", "model": {**TINY["model"], "arch": arch},
                "task": {"group": "sign", "n": n},
                "train": {**TINY["train"], "steps": 20, "eval_every": 10}}
        (d / f"{stem}.yaml").write_text(yaml.safe_dump(data))


@pytest.mark.slow
def test_reproduce_trains_reuses_and_reports_a_verdict(tmp_path, monkeypatch, capsys):
    write_configs(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "fig3", "--seeds", "2"]) == 0
    err = capsys.readouterr().err
    assert "8 runs: 0 finished (reused), 8 to train" in err
    assert re.search(r"cpu-bert-s0: trained; 1 of 8 done, \d+ min in", err) and ": trained; 8 of 8 done" in err
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert runs == sorted(f"cpu-{v}-s{s}" for v in ("bert", "albert", "bert-ntr12", "albert-ntr12") for s in (0, 1))
    assert yaml.safe_load((tmp_path / "runs" / "cpu-bert-s1" / "config.yaml").read_text())["seed"] == 1
    ntr12 = yaml.safe_load((tmp_path / "runs" / "cpu-bert-ntr12-s0" / "config.yaml").read_text())["train"]
    # at CPU scale n_tr = 12 trains three times the config's budget: 60 steps of the tiny config's 20
    assert ntr12["n_tr"] == 12 and (ntr12["steps"], ntr12["eval_every"]) == (60, 30)
    report = tmp_path / "reports" / "fig3-cpu"
    text = (report / "fig3.md").read_text()
    assert (report / "accuracy.png").is_file() and "| bert | 2 |" in text
    assert "**The paper's claim.**" in text and "`legolab reproduce fig3 --seeds 2`" in text and "wall time" in text
    # every time says its machine: the command's, and the runs' (8, all trained here, with one label)
    assert f" s on {machine_name()} (training time of its runs, summed: " in text
    assert re.search(r"summed: [\d,]+ s, on [^;]+ threads?, (fp32|bf16) \(8 runs\); finished", text)
    verdicts = json.loads((report / "summary.json").read_text())["verdicts"]
    assert len(verdicts) == 4 and all(v in VERDICTS for _, v, _ in verdicts)
    # a tiny model learns nothing: the extrapolation claim cannot be tested, and says why
    assert verdicts[1][1] == UNTESTABLE and "did not learn its supervised variables" in verdicts[1][2]
    index = (tmp_path / "reports" / "index-cpu.md").read_text()
    assert "[fig3.md](fig3-cpu/fig3.md)" in index and "| fig5 |" in index and "not run" in index
    capsys.readouterr()
    # a second call reuses every finished run
    assert main(["reproduce", "fig3", "--seeds", "2"]) == 0
    err = capsys.readouterr().err
    assert err.count("done, reused") == 8 and "8 runs: 8 finished (reused), 0 to train" in err
    assert len(read_jsonl(tmp_path / "runs" / "cpu-bert-s0" / "metrics.jsonl")) == 2


def test_reproduce_shortcut_and_unknown_figure(tmp_path, monkeypatch, capsys):
    write_configs(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "fig11", "--seeds", "1"]) == 0
    cfg = yaml.safe_load((tmp_path / "runs" / "cpu-bert-0to4+11-s0" / "config.yaml").read_text())
    assert cfg["train"]["supervise"] == [0, 1, 2, 3, 4, 11]
    assert "| albert-0to4+11 | 1 |" in (tmp_path / "reports" / "fig11-cpu" / "fig11.md").read_text()
    assert main(["reproduce", "fig99"]) == 2
    assert "unknown figure" in capsys.readouterr().err


def test_a_failed_run_is_named_in_the_report_and_the_others_finish(tmp_path, monkeypatch, capsys):
    import legolab.reproduce.runs as runs

    write_configs(tmp_path)
    monkeypatch.chdir(tmp_path)
    real = runs.ensure_run

    def flaky(run, root, log):
        if run.name == "cpu-albert-s0":
            raise RuntimeError("boom\nsecond line of a traceback")
        return real(run, root, log)

    monkeypatch.setattr(runs, "ensure_run", flaky)
    assert main(["reproduce", "fig17", "--seeds", "1"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "cpu-albert-s0: failed: RuntimeError: boom" in err
    text = (tmp_path / "reports" / "fig17-cpu" / "fig17.md").read_text()
    assert "- albert, cpu-albert-s0: failed: RuntimeError: boom\n" in text and "second line" not in text
    assert "runs missing: albert" in text and "| bert-thin | 1 |" in text


def test_an_interrupted_run_stops_the_whole_reproduce_with_one_line(tmp_path, monkeypatch, capsys):
    import signal

    import legolab.reproduce.runs as runs
    from legolab.errors import Interrupted

    write_configs(tmp_path)
    monkeypatch.chdir(tmp_path)
    tried = []

    def interrupted(run, root, log):
        tried.append(run.name)
        raise Interrupted(signal.SIGINT, f"runs/{run.name}: stopped at step 7 of 20 (SIGINT), checkpoint saved; "
                          f"continue with: legolab train --resume runs/{run.name}")

    monkeypatch.setattr(runs, "ensure_run", interrupted)
    assert main(["reproduce", "fig17", "--seeds", "1"]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(tried) == 1  # Ctrl-C does not skip to the next run
    assert err[-1] == (f"legolab: reproduce stopped (SIGINT); runs/{tried[0]}: stopped at step 7 of 20 (SIGINT). "
                       "The same reproduce command continues where each run stopped")
    assert not (tmp_path / "reports").exists()


def test_a_reproduce_run_stopped_in_its_mimicking_stage_continues_that_stage(tmp_path, monkeypatch):
    import os
    import signal

    from legolab.errors import Interrupted
    from legolab.reproduce.runs import Run, ensure_run

    write_configs(tmp_path)
    monkeypatch.chdir(tmp_path)
    run = Run("cpu-mimic-bert-s0", "configs/cpu/bert.yaml", ["seed=0"],
              {"steps": 20, "batch_size": 8, "lr": 1e-2, "residual_init": 0.0, "log_every": 5})

    def signal_at_step_10(line):
        if "step     10/" in line:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(Interrupted, match="mimicking stopped at step 10 of 20"):
        ensure_run(run, tmp_path / "runs", signal_at_step_10)
    lines = []
    run_dir = ensure_run(run, tmp_path / "runs", lines.append)
    assert any("continuing" in line and "from step 10 of 20" in line for line in lines), lines
    assert read_jsonl(run_dir / "metrics.jsonl")[-1]["step"] == 20
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["train"]["init"].endswith("cpu-mimic-bert-s0-mimic-init")


@pytest.mark.slow
def test_sigterm_to_reproduce_with_jobs_checkpoints_every_worker_and_starts_no_queued_run(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    write_configs(tmp_path)
    for f in (tmp_path / "configs" / "cpu").iterdir():
        data = yaml.safe_load(f.read_text())
        data["train"].update(steps=100_000, eval_every=50_000)
        f.write_text(yaml.safe_dump(data))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "legolab", "reproduce", "fig11", "--seeds", "1", "--jobs", "2"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 120
    while len(list((tmp_path / "runs").glob("*/metrics.jsonl"))) < 2 and time.time() < deadline:
        time.sleep(0.5)  # both workers have evaluated step 0: both are training
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("legolab: reproduce stopped (SIGTERM); runs/cpu-") and "not started" in last, last
    assert "Traceback" not in err and "BrokenProcessPool" not in err
    started = [d for d in (tmp_path / "runs").iterdir() if (d / "checkpoints" / "last.safetensors").is_file()]
    assert len(started) == 2  # each worker saved its step; the two queued runs never began
    assert len(list((tmp_path / "runs").iterdir())) == 2


def test_a_worker_starts_no_run_once_the_parent_was_signalled(tmp_path, monkeypatch):
    """A signal on a run's last step finishes that run (the trainer absorbs it): the parent's
    event, not the worker's own handler, must then keep the worker from its next queued run."""
    import multiprocessing
    import signal

    from legolab.errors import Interrupted
    from legolab.reproduce import runs
    from legolab.reproduce.runs import Run

    write_configs(tmp_path)
    monkeypatch.chdir(tmp_path)
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    event = multiprocessing.get_context("spawn").Event()
    try:
        runs._worker_start(event)
        event.set()
        with pytest.raises(Interrupted, match="cpu-bert-s0: not started") as e:
            runs._worker(Run("cpu-bert-s0", "configs/cpu/bert.yaml"), str(tmp_path / "runs"))
        assert e.value.signum == signal.SIGTERM
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        runs._stop_event = None
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_reproduce_all_trains_the_set_then_writes_every_report_and_the_index(tmp_path, monkeypatch):
    import legolab.reproduce as reproduce

    write_configs(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(reproduce, "FIGURES", {k: reproduce.FIGURES[k] for k in ("fig3", "fig17")})
    monkeypatch.setattr(reproduce, "ORDER", ["fig3", "fig17", "fig10"])
    import legolab.reproduce.analyses as analyses

    monkeypatch.setattr(analyses, "STEMS", {"cpu": {k: v for k, v in figures.STEMS["cpu"].items() if k != "pretrain"}})
    assert main(["reproduce", "all", "--seeds", "1", "--jobs", "2"]) == 0
    index = (tmp_path / "reports" / "index-cpu.md").read_text()
    assert "[fig3.md]" in index and "[fig17.md]" in index
    # fig10 could not run at all: its report says why, in one line, as the index does
    assert f"{UNTESTABLE}: the figure" in index
    rows = {line.split(" | ")[0]: line.split(" | ") for line in index.splitlines() if line.startswith("| fig")}
    assert re.fullmatch(r"\d+ s", rows["| fig3"][4]) and rows["| fig10"][4] == "none"  # training, summed
    # one seed on 2 cores: the sum per seed, halved; a figure that trained nothing has no bound
    assert float(rows["| fig3"][5][:-2]) == pytest.approx(float(rows["| fig3"][4][:-2]) / 2, abs=1)
    assert rows["| fig10"][5] == "" and "0 of the 2 figures that train cannot meet the goal" in index
    assert rows["| fig3"][3] == "1" and rows["| fig10"][3] == "none"  # seeds: the runs'; fig10 never ran
    assert "no cpu-scale pretraining config" in (tmp_path / "reports" / "fig10-cpu" / "fig10.md").read_text()
    # fig17 reused fig3's ALBERT and BERT: five runs in all
    assert len(list((tmp_path / "runs").iterdir())) == 5


def test_reproduce_all_queues_the_analyses_own_runs_with_the_figures(tmp_path, monkeypatch):
    """So that --jobs keeps every lane busy across the set, pretraining and sweeps included."""
    import legolab.reproduce as reproduce

    write_configs(tmp_path)
    monkeypatch.chdir(tmp_path)
    queued = []

    def record(runs, *args, **kwargs):
        queued.extend(runs)
        raise LegoError("recorded")

    monkeypatch.setattr(reproduce, "train_runs", record)
    assert main(["reproduce", "all", "--seeds", "2"]) == 2
    names = {run.name for run in queued}
    assert {"cpu-bert-s1", "cpu-pretrain-lego-v1-s1", "cpu-template-aba-abb-standard-n16-s1",
            "cpu-listops-flat-sm-s1"} <= names
    assert [run.pretrain for run in queued].count(True) == 6


def test_a_list_of_figures_queues_their_runs_in_one_pool(tmp_path, monkeypatch, capsys):
    import legolab.reproduce as reproduce

    write_configs(tmp_path)
    monkeypatch.chdir(tmp_path)
    queued = []

    def record(runs, *args, **kwargs):
        queued.append([run.name for run in runs])
        raise LegoError("recorded")

    monkeypatch.setattr(reproduce, "train_runs", record)
    assert main(["reproduce", "fig15,fig16", "--seeds", "2"]) == 2
    assert len(queued) == 1 and {"cpu-bert-n16-s1", "cpu-albert-depth8-s1", "cpu-bert-s1"} <= set(queued[0])
    assert main(["reproduce", "fig15,fig99"]) == 2
    assert "unknown figure 'fig99'" in capsys.readouterr().err and len(queued) == 1


def test_jobs_start_the_longest_runs_first(tmp_path, monkeypatch):
    """So that the last long run does not train alone while the other lanes sit idle."""
    import concurrent.futures

    from legolab.reproduce import figure_runs
    from legolab.reproduce.runs import train_runs
    from legolab.training.config import load_config

    write_configs(tmp_path)
    monkeypatch.chdir(tmp_path)
    submitted = []

    class Recorder:  # a pool that records what it is given, in order, and trains nothing
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit(self, fn, run, root):
            submitted.append(run.name)
            future = concurrent.futures.Future()
            future.set_result(root)
            return future

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Recorder)
    runs = [run for _, run in figure_runs("fig16", "cpu", 1)]
    depth = {r.name: load_config(r.config, r.overrides).model.n_layers for r in runs}
    assert depth[runs[0].name] < depth[runs[-1].name]  # the figure's order: BERT shallow to deep, then ALBERT
    train_runs(runs, tmp_path / "runs", print, jobs=2)
    assert [depth[name] for name in submitted] == sorted(depth.values(), reverse=True)
    assert submitted[:2] == ["cpu-bert-depth8-s0", "cpu-albert-depth8-s0"]  # equal work: the figure's order


@pytest.mark.slow
def test_runs_side_by_side_train_the_same_bytes_as_one_after_another(tmp_path, monkeypatch):
    for sub, jobs in (("a", "1"), ("b", "2")):
        (tmp_path / sub).mkdir()
        write_configs(tmp_path / sub)
        monkeypatch.chdir(tmp_path / sub)
        assert main(["reproduce", "fig11", "--seeds", "1", "--jobs", jobs]) == 0
    for name in ("cpu-bert-0to4-s0", "cpu-albert-0to4+11-s0"):
        a, b = (read_jsonl(tmp_path / sub / "runs" / name / "metrics.jsonl") for sub in "ab")
        assert strip_clock(a) == strip_clock(b)


@pytest.mark.slow
def test_jobs_work_from_python_dash_m(tmp_path):
    """``reproduce --jobs`` from the real entry point: spawned workers must not rerun the CLI."""
    import os
    import subprocess
    import sys

    write_configs(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "legolab", "reproduce", "fig17", "--seeds", "1", "--jobs", "2"],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "failed" not in done.stderr and len(list((tmp_path / "runs").iterdir())) == 3


def test_paper_scale_path_runs_end_to_end_with_a_shrunk_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the shipped paper configs
    shrink = ["model.n_layers=1", "model.d_model=16", "model.n_heads=2", "model.d_ff=32",
              "train.train_size=64", "train.test_size=32", "train.epochs=1", "train.batch_size=32",
              "train.eval_batch_size=32"]
    assert main(["reproduce", "fig18", "--scale", "paper", "--seeds", "1", "--mimic-steps", "2", *shrink]) == 0
    cfg = yaml.safe_load((tmp_path / "runs" / "paper-d3-albert-s0" / "config.yaml").read_text())
    assert cfg["task"]["group"] == "d3" and cfg["model"]["arch"] == "albert" and cfg["train"]["lr"] == 5e-5
    mimic = yaml.safe_load((tmp_path / "runs" / "paper-d3-mimic-bert-s0-mimic-init" / "config.yaml").read_text())
    assert mimic["model"]["residual_init"] == 1.0  # the public code's start: BERT's initialisation
    assert mimic["model"]["dropout"] == mimic["model"]["attn_dropout"] == 0.1  # and its dropout
    text = (tmp_path / "reports" / "fig18-paper" / "fig18.md").read_text()
    assert "**Paper scale.**" in text and "zero-residual" not in text


def test_every_figure_resolves_to_valid_configs_at_both_scales(tmp_path, monkeypatch):
    from legolab.reproduce import FIGURES, figure_runs
    from legolab.training.config import load_config

    monkeypatch.chdir(tmp_path)  # the shipped configs, not a checkout's
    for scale in ("cpu", "paper"):
        for fig in FIGURES:
            for label, run in figure_runs(fig, scale, 2, pretrained="hf:/models/bert-base-uncased"):
                cfg = load_config(run.config, run.overrides)
                assert cfg.seed in (0, 1)
                if scale == "paper":
                    assert cfg.model.d_model in (768, 96) and cfg.model.n_layers in (3, 6, 9, 12), (fig, run.name)
                if "pretrained" in label:
                    assert cfg.train.init == ("minilm" if scale == "cpu" else "hf:/models/bert-base-uncased")
                    assert cfg.model.tokenizer == "wordpiece"
                if "zero-residual" in label:
                    assert scale == "cpu" and cfg.model.residual_init == 0 and not run.mimic
    with pytest.raises(LegoError, match="--pretrained"):
        figure_runs("fig6", "paper", 1, pretrained=None)


def test_labels_mean_one_config_and_equal_configs_share_a_run(tmp_path, monkeypatch):
    from legolab.reproduce import figure_runs

    monkeypatch.chdir(tmp_path)
    names = {}
    for scale in ("cpu", "paper"):
        for fig in figures.FIGURES:
            for label, run in figure_runs(fig, scale, 1, pretrained="hf:/x"):
                assert names.setdefault((scale, label), run.name) == run.name, (fig, label)
    assert names[("cpu", "bert-n12")] == names[("cpu", "bert-depth6")] == names[("cpu", "bert")] == "cpu-bert-s0"
    assert names[("paper", "albert-depth12")] == "paper-albert-s0"
    assert names[("cpu", "albert-depth12")] == "cpu-albert-depth12-s0"


def test_mimicking_uses_the_public_codes_values_at_paper_scale():
    from legolab.reproduce import figure_runs

    cpu = dict(figure_runs("fig18", "cpu", 1))["d3-mimic-bert"].mimic
    paper = dict(figure_runs("fig18", "paper", 1))["d3-mimic-bert"].mimic
    assert cpu == {"steps": 400, "batch_size": 32, "lr": None, "residual_init": 0.0, "dropout": None}
    assert paper == {"steps": 1000, "batch_size": 200, "lr": 5e-5, "residual_init": 1.0, "dropout": 0.1}
    from legolab.reproduce import mimic_settings

    assert mimic_settings("paper", "albert")["steps"] == 5000


def summary(mean, supervised=range(6), first=None, dip=(0.0, 0)):
    first = first or [None] * len(mean)
    return {"seeds": 1, "mean": mean, "min": mean, "max": mean, "supervised": list(supervised), "chance": 0.5,
            "first_pass": first, "reached": [int(f is not None) for f in first],
            "max_dip": dip, "steps": 100, "train_time_s": [1.0]}


def test_judges_say_holds_does_not_hold_and_cannot_be_tested():
    learned_ext = summary([1.0] * 6 + [0.95, 0.9, 0.7, 0.5, 0.5, 0.5])
    learned_not = summary([1.0] * 6 + [0.6, 0.5, 0.5, 0.5, 0.5, 0.5])
    unlearned = summary([1.0, 1.0, 0.5, 0.5, 0.5, 0.5] + [0.5] * 6)
    part = "n_tr = 6: ALBERT extrapolates"
    v = {p[:len(part)]: (verdict, ev) for p, verdict, ev in figures.judge_fig3({"albert": learned_ext, "bert": learned_not})}
    assert v[part][0] == HOLDS and "albert 85%, bert 53%" in v[part][1]
    assert figures.judge_fig3({"albert": learned_not, "bert": learned_ext})[1][1] == FAILS
    assert figures.judge_fig3({"albert": unlearned, "bert": learned_ext})[1][1] == UNTESTABLE
    assert figures.judge_fig3({"albert": learned_ext})[0][1] == UNTESTABLE  # runs missing
    # the shortcut: #11 passes before most of #1..#10
    early = summary([1.0] * 12, range(12), first=[10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 15])
    late = summary([1.0] * 12, range(12), first=[10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120])
    assert figures.shortcut_early({"x": early}, "x", True)[1] == HOLDS
    assert figures.shortcut_early({"x": late}, "x", True)[1] == FAILS
    assert figures.shortcut_early({"x": late}, "x", False)[1] == HOLDS
    # #11 learned in only some seeds: not the shortcut, and the evidence says in how many
    some = {**late, "seeds": 3, "first_pass": late["first_pass"][:-1] + [None], "reached": [3] * 11 + [2],
            "mean": [1.0] * 11 + [0.9], "min": [1.0] * 11 + [0.8], "max": [1.0] * 12}
    _, verdict, evidence = figures.shortcut_early({"x": some}, "x", True)
    assert verdict == FAILS and evidence.startswith("#11 reached 95% in 2 of 3 seeds (final 90%, 80-100% over seeds)")
    assert figures.shortcut_early({"x": some}, "x", False)[1] == UNTESTABLE
    # Fig. 15: n = 8's own part is judged even where the longest chain cannot be
    n8 = summary([1.0, 1.0] + [0.5] * 6, range(2))
    n20 = summary([1.0, 1.0] + [0.5] * 18, range(14))
    S = {"bert-n8": n8, "bert-n12": learned_ext, "bert-n16": n20, "bert-n20": n20}
    (short, verdict, evidence), (_, longer, why) = figures.judge_fig15("paper")(S)
    assert short.startswith("n = 8 learns") and verdict == HOLDS and "unseen #2..#7 50% (chance 50%)" in evidence
    assert longer == UNTESTABLE and why.startswith("n = 20 did not learn")
    assert figures.judge_fig15("paper")({**S, "bert-n8": summary([1.0, 1.0] + [0.9] * 6, range(2))})[0][1] == FAILS
    assert figures.judge_fig15("paper")({**S, "bert-n8": summary([1.0, 0.6] + [0.5] * 6, range(2))})[0][1] == UNTESTABLE
    # at CPU scale the longest chain is n = 16: judged against n = 8 without any n = 20
    n16 = summary([1.0] * 10 + [0.9, 0.7, 0.6, 0.5, 0.5, 0.5], range(10))
    part, longer, why = figures.judge_fig15("cpu")({"bert-n8": n8, "bert-n12": learned_ext, "bert-n16": n16})[1]
    assert part.startswith("longer training chains extrapolate better: n = 16 beyond n = 8") and longer == HOLDS
    assert why == "mean accuracy on the 6 unsupervised variables: n = 8 50%, n = 12 68%, n = 16 62%"
    flat = summary([1.0] * 10 + [0.5] * 6, range(10))
    assert figures.judge_fig15("cpu")({"bert-n8": n8, "bert-n12": learned_ext, "bert-n16": flat})[1][1] == FAILS


def test_fig15_stops_at_n16_on_three_times_the_budget_at_cpu_scale():
    """n = 20 does not fit at CPU scale on any budget tried; n = 16 needs three times the steps."""
    cpu, paper = figures.catalogue("cpu"), figures.catalogue("paper")
    assert figures.FIGURES["fig15"].variant_labels("cpu") == ["bert-n8", "bert-n12", "bert-n16"]
    assert figures.FIGURES["fig15"].variant_labels("paper") == ["bert-n8", "bert-n12", "bert-n16", "bert-n20"]
    assert (cpu["bert-n16"].budget, cpu["bert-n12"].budget, paper["bert-n16"].budget) == (3, 1, 1)
    assert "task.n=16" in cpu["bert-n16"].overrides and "train.n_tr=10" in cpu["bert-n16"].overrides


def test_run_summary_finds_first_passes_and_dips(tmp_path):
    from legolab.io import write_jsonl
    from legolab.reproduce.report import run_summary

    write_configs(tmp_path, n=4)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text((tmp_path / "configs" / "cpu" / "bert.yaml").read_text())
    write_jsonl(run / "metrics.jsonl", [{"step": s, "time": s / 10, "test_acc_per_index": acc} for s, acc in
                                        ((10, [0.96, 0.5, 0.5, 0.5]), (20, [0.7, 0.96, 0.5, 0.5]), (30, [1.0, 1.0, 0.97, 0.6]))])
    s = run_summary(run)
    assert s["first_pass"] == [10, 20, 30, None] and s["dip"] == pytest.approx((0.26, 0))
    assert s["supervised"] == [0, 1, 2, 3] and s["chance"] == 0.5 and s["time"] == 3.0


def fake_finished_run(root, name, config):
    """A run directory that counts as finished: its config and a last evaluation at its final step."""
    from legolab.io import write_jsonl

    run = root / "runs" / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(config.read_text())
    write_jsonl(run / "metrics.jsonl", [{"step": 20, "epoch": 1.0, "time": 2.0, "test_acc_per_index": [1.0] * 6 + [0.5] * 6}])


def test_report_only_trains_nothing_and_names_what_is_missing(tmp_path, monkeypatch, capsys):
    from legolab.reproduce import runs_for

    write_configs(tmp_path)
    monkeypatch.chdir(tmp_path)
    # no run finished: no report is written, nor a blank one over the report there is
    assert main(["reproduce", "fig17", "--seeds", "1", "--report-only"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("legolab: error: fig17: --report-only found none of its 3 runs finished under runs/, so it has no "
                   "report (train them without --report-only)") and not (tmp_path / "reports").exists()
    report = tmp_path / "reports" / "fig17-cpu" / "fig17.md"
    report.parent.mkdir(parents=True)
    report.write_text("an earlier report")
    assert main(["reproduce", "fig17", "--seeds", "1", "--report-only"]) == 2
    assert "reports/fig17-cpu/fig17.md is left as it was" in capsys.readouterr().err
    assert report.read_text() == "an earlier report" and not (tmp_path / "runs").exists()
    # one of its three runs finished: the report is written and names the others
    fake_finished_run(tmp_path, "cpu-albert-s0", tmp_path / "configs" / "cpu" / "albert.yaml")
    assert main(["reproduce", "fig17", "--seeds", "1", "--report-only"]) == 0
    text = report.read_text()
    assert "- bert-thin, cpu-bert-thin-s0: not trained yet (--report-only)" in text
    assert f"**{UNTESTABLE}** | runs missing: bert-thin" in text
    assert SCALE_NOTES["cpu"] in text
    (_, minilm_run), = runs_for(["minilm-random-ntr12"], "cpu", 1)
    fake_finished_run(tmp_path, minilm_run.name, tmp_path / "configs" / "cpu" / "bert.yaml")
    assert main(["reproduce", "fig12", "--seeds", "1", "--report-only"]) == 0
    minilm = (tmp_path / "reports" / "fig12-cpu" / "fig12.md").read_text()
    assert SCALE_NOTES["cpu-minilm"] in minilm and "kernel-7" not in minilm  # not the 6 x 64 recipe's runs


@pytest.mark.slow
def test_probe_figure_reads_fig3s_runs_and_judges_the_flow(tmp_path, monkeypatch):
    write_configs(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "fig4", "--seeds", "2"]) == 0
    report = tmp_path / "reports" / "fig4-cpu"
    assert (report / "probe-bert.png").is_file() and (report / "probe-albert.json").is_file()
    assert (report / "probe-albert-s1.json").is_file()  # every seed is probed, not only seed 0
    assert "albert, seed 1: first layer" in (report / "fig4.md").read_text()
    probe = json.loads((report / "probe-albert.json").read_text())
    assert len(probe["accuracy"]) == 3 and len(probe["accuracy"][0]) == 12  # embeddings + 2 layers, 12 steps
    verdicts = json.loads((report / "summary.json").read_text())["verdicts"]
    assert len(verdicts) == 1 and verdicts[0][1] in VERDICTS


def test_better_says_why_a_model_that_does_not_fit_its_training_variables_cannot_be_judged():
    def summary(acc):
        return {"mean": acc, "supervised": [0, 1, 2]}
    fits, fails = summary([1.0, 1.0, 1.0, 0.9, 0.5]), summary([1.0, 0.2, 0.3, 0.2, 0.2])
    verdict = better({"a": fails, "b": fits}, "a", "b")
    assert verdict[1] == UNTESTABLE and "the lowest of #0..#2: 20%; b's: 100%" in verdict[2]
    assert better({"a": fits, "b": fails}, "a", "b")[1] == HOLDS


def test_sooner_judges_how_fast_the_supervised_variables_are_learned_even_when_none_fits_them_all():
    def run(first):
        return summary([1.0] * 3 + [0.5] * 9, first=first + [None] * (12 - len(first)))
    three, one, none = run([50, 200, 600]), run([1900]), run([])
    verdict = figures.sooner({"p": three, "r": one}, "p", "r")
    assert verdict[1] == HOLDS and "p 3 of 6 (#0..#2, the last at step 600); r 1 of 6 (#0, the last at step 1,900)" in verdict[2]
    assert figures.sooner({"p": one, "r": three}, "p", "r")[1] == FAILS
    assert figures.sooner({"p": run([900]), "r": one}, "p", "r")[1:] == \
        (HOLDS, "supervised variables past 95%: p 1 of 6 (#0, the last at step 900); r 1 of 6 (#0, the last at step 1,900) "
                "(one variable each: thin evidence)")  # as many, earlier
    assert figures.sooner({"p": none, "r": none}, "p", "r")[1] == UNTESTABLE
    parts = {p: v for p, v, _ in figures.judge_fig6({"minilm-pretrained": three, "minilm-random": one})}
    assert parts["pretrained learns sooner than random init"] == HOLDS
    assert parts["pretrained generalises better than random init"] == UNTESTABLE  # #3..#5 not fit


def test_lego_attention_asks_for_a_match_within_the_margin_and_a_sooner_fit_not_a_win():
    def run(mean, first):
        return summary(mean, first=first + [None] * (12 - len(first)))
    bert = run([1.0] * 6 + [0.68, 0.44] + [0.51] * 4, [750, 1500, 2000, 2500, 2750, 3000])
    lego = run([1.0] * 6 + [0.48] * 6, [500, 1250, 1500, 1750, 1750, 2000])  # 1.7 points below bert
    verdicts = figures.judge_lego_attention({"bert": bert, "lego-v1": lego})
    parts = {p: v for p, v, _ in verdicts}
    assert verdicts[1][2].endswith("; mean step to 95%: lego-v1 1,458, bert 2,083")  # both fit all six: how fast
    assert parts["LEGO v1 matches BERT on Task 1 (all 12 variables, within 5 points)"] == HOLDS
    assert parts["LEGO v1 learns the supervised variables sooner than BERT"] == HOLDS
    assert parts["LEGO v0 matches BERT on Task 1 (all 12 variables, within 5 points)"] == UNTESTABLE  # not run
    worse = run([1.0] * 3 + [0.5] * 9, [500, 600, 700])
    assert figures.matches({"bert": bert, "lego-v0": worse}, "lego-v0", "bert", range(12))[1] == FAILS


def test_a_report_counts_the_runs_per_machine_even_when_a_run_moved_or_predates_the_record():
    moved = run_machines([{"machine": "A"}, {"machine": "A"}, {"machine": "B"}])
    assert moved == ["A", "B"]
    assert count_machines([moved, ["A"], []]) == {"A": 2, "B": 1, "an unrecorded machine": 1}


def test_the_index_says_how_many_seeds_each_report_rests_on():
    # a missing run shows as a range; an analysis gives its own count, else its command's --seeds
    assert report_seeds({"summary": {"bert": {"seeds": 3}, "albert": {"seeds": 2}}, "command": "x --seeds 3"}) == "2-3"
    assert report_seeds({"summary": {"bert": {"seeds": 1}}}) == "1"
    assert report_seeds({"summary": {"add": {"MAX": {"seeds": 3}}}, "seeds": 3}) == "3"
    assert report_seeds({"command": "legolab reproduce fig10 --seeds 2 --threads 1"}) == "2"
    assert report_seeds({"command": "legolab reproduce fig10"}) == ""
    assert report_seeds({"seeds": 0, "command": "legolab reproduce fig10 --seeds 3"}) == "none"  # could not run


def test_report_only_tells_a_run_stopped_part_way_from_one_never_started(tmp_path):
    from legolab.io import write_jsonl
    from legolab.reproduce.runs import _not_finished

    write_configs(tmp_path, n=4)
    run = tmp_path / "run"
    assert _not_finished(run) == "not trained yet (--report-only)"
    run.mkdir()
    (run / "config.yaml").write_text((tmp_path / "configs" / "cpu" / "bert.yaml").read_text())
    write_jsonl(run / "metrics.jsonl", [])
    assert _not_finished(run).startswith("started but not finished, no evaluation yet;")
    write_jsonl(run / "metrics.jsonl", [{"step": 10, "time": 1.0, "test_acc_per_index": [0.5] * 4}])
    assert _not_finished(run).startswith("started but not finished, last evaluation at step 10;")

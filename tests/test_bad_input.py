"""Every bad input: exit status 0 or 2, never a traceback; an error is one line; a command that
fails leaves no directory behind. A table of cases over CLI arguments, config values and
corrupted run-directory files (each case runs the real command line in-process)."""

import os
import shutil

import pytest
import torch
from conftest import TINY

from legolab.cli import main

TINY_TRAIN = ["train.steps=2", "train.eval_every=2", "train.test_size=20"]

# ---- config values: `legolab train CONFIG key=value` -----------------------------------------
BAD_VALUES = {
    "seed": ["-1", "99999999999999999999", "abc", "1.5", "[1]"],
    "name": ["", "a/b", ".hidden"],
    "task.n": ["0", "-1", "100000", "x", "[3]", "2.5"],
    "task.n_vars": ["1", "1000", "x"],
    "task.n_min": ["0", "99"],
    "task.group": ["q8", "/nonexistent.json", "z0", "d1x", "{}"],
    "task.name": ["nope"],
    "task.colour": ["red"],
    "model.arch": ["gpt"],
    "model.n_layers": ["0", "-1", "x", "1e9"],
    "model.d_model": ["0", "33", "-8"],
    "model.n_heads": ["0", "3", "x"],
    "model.dropout": ["-0.1", "1.5", "nan"],
    "model.attention": ["foo"],
    "model.norm": ["mid"],
    "model.max_len": ["5", "0"],
    "model.init_std": ["nan", "-1"],
    "model.conv": ["-1", "x"],
    "model.wings": ["2"],
    "train.lr": ["nan", "inf", "-1", "0", "abc", "[1]"],
    "train.batch_size": ["0", "-1", "1000000000", "1.5", "x"],
    "train.test_size": ["0", "-1", "1000000000"],
    "train.valid_size": ["0", "-5", "1000000000"],
    "train.train_size": ["-1", "1000000000", "5"],
    "train.steps": ["-1", "x", "inf"],
    "train.epochs": ["12", "-1"],
    "train.eval_every": ["-1"],
    "train.eval_batch_size": ["0"],
    "train.warmup": ["nan", "-1", "inf"],
    "train.clip": ["nan", "-1"],
    "train.min_lr": ["2", "-0.5"],
    "train.beta1": ["1", "-0.1"],
    "train.weight_decay": ["-1"],
    "train.schedule": ["bogus"],
    "train.dtype": ["fp8"],
    "train.device": ["tpu", "cuda:x"],
    "train.log": ["wandb"],
    "train.n_tr": ["-1", "99"],
    "train.supervise": ["[]", "[99]", "x", "[-1]"],
    "train.depth_min": ["3"],
    "train.depth_max": ["99"],
    "train.eval_depth": ["-1", "99"],
    "train.guide": ["-1", "1"],
    "train.scaffold": ["-1", "8"],
    "train.curriculum_n": ["[2]", "[99]"],
    "train.init": ["/nonexistent", "hf:/nonexistent"],
    "train.threads": ["-1"],
    "train.compile": ["maybe"],
    "train.colour": ["red"],
    "a.b.c": ["1"],
}
CONFIG_CASES = [(f"{key}={value}",) for key, values in BAD_VALUES.items() for value in values]
CONFIG_CASES += [("noequals-after",), ("train=1",)]
# combinations that would build and do nothing
CONFIG_CASES += [("model.attention=lego-v0", "model.mimetic_init=true"),
                 ("model.attention=lego-v0", "model.identity_scaled=true", "model.identity_init=0.5"),
                 ("model.identity_init=0.5",), ("model.attention=lego-v0", "model.attn_impl=math"),
                 ("model.lego_kernel=3",), ("model.attention=lego-v0", "model.lego_heads=1")]

# ---- other command-line arguments (RUN: a trained tiny run; FILE: a plain file) --------------
CLI_CASES = [
    ["eval", "RUN", "--count", "0"], ["eval", "RUN", "--count", "-5"], ["eval", "RUN", "--seed", "-1"],
    ["eval", "RUN", "--seed", "99999999999999999999"], ["eval", "RUN", "--threads", "-1"], ["eval", "RUN", "--n", "0"],
    ["eval", "RUN", "--n", "1000"], ["eval", "RUN", "--depth", "0"], ["eval", "RUN", "--depth", "99"],
    ["eval", "RUN", "--group", "d3"], ["eval", "RUN", "--group", "q8"], ["eval", "RUN", "--n-vars", "1"],
    ["eval", "RUN", "--checkpoint", "middle"], ["eval", "RUN", "--count", "x"], ["eval", "FILE"], ["eval", "MISSING"],
    ["eval", "RUN", "--count", "3"],
    ["analyze", "attention", "RUN", "--count", "0"], ["analyze", "attention", "RUN", "--window", "-1"],
    ["analyze", "attention", "RUN", "--heads", "9.9"], ["analyze", "attention", "RUN", "--heads", "x"],
    ["analyze", "attention", "RUN", "--depth", "99"], ["analyze", "attention", "FILE"],
    ["analyze", "probe", "RUN", "--train", "0"], ["analyze", "probe", "RUN", "--test", "0"],
    ["analyze", "probe", "RUN", "--seed", "-2"], ["analyze", "probe", "MISSING"], ["analyze", "nothing", "RUN"],
    ["plot", "FILE"], ["plot", "MISSING"], ["plot", "RUN", "--out", "/proc/x.png"],
    ["generate", "--count", "-1"], ["generate", "--start", "-1"], ["generate", "--seed", "-3"], ["generate", "--n", "0"],
    ["generate", "--n", "100000"], ["generate", "--n-vars", "2"], ["generate", "--n-min", "99"],
    ["generate", "--group", "q8"], ["generate", "--group", "FILE"], ["generate", "--group", "BINJSON"],
    ["generate", "--group", "BINYAML"], ["generate", "--group", "BADTABLE"], ["generate", "--group", "d3", "--notation", "code"],
    ["generate", "--out", "DIR"], ["generate", "--out", "/proc/x"], ["generate", "--format", "xml"],
    ["generate", "--count", "2", "--split", "valid"],
    ["train"], ["train", "--resume", "MISSING"], ["train", "--resume", "FILE"], ["train", "CONFIG", "extra", "x"],
    ["train", "MISSING"], ["train", "FILE"], ["train", "CONFIG", "--name", ""], ["train", "CONFIG", "--name", "a/b"],
    ["train", "CONFIG", "--runs", "FILE"], ["train", "CONFIG", "--runs", "/proc/runs"], ["train", "--resume", "RUN", "train.lr=1"],
    ["train", "CONFIG", "--init", "MISSING"], ["train", "CONFIG", "--init", "FILE"],
    ["mimic"], ["mimic", "MISSING"], ["mimic", "CONFIG", "--steps", "-1"], ["mimic", "CONFIG", "--lr", "nan"],
    ["mimic", "CONFIG", "--name", "a/b"], ["mimic", "CONFIG", "--batch-size", "0"],
    ["pretrain", "seed=abc"], ["pretrain", "name=x/y"], ["pretrain", "pretrain.corpus=/nonexistent"],
    ["pretrain", "--resume", "MISSING"], ["pretrain", "model.n_layers=0"],
    ["reproduce", "fig99"], ["reproduce", "fig3", "--seeds", "0"], ["reproduce", "fig3", "--seeds", "-1"],
    ["reproduce", "fig3", "--scale", "huge"], ["reproduce", "fig3", "--runs", "FILE"],
    ["flops", "--model", "gpt"], ["flops", "--seq", "x"], ["flops", "--seq", "2"], ["flops", "--batch", "0"],
    ["flops", "--threads", "-1"],
    ["demo", "--config", "MISSING"], ["demo", "--steps", "-1"],
    ["tasks", "extra"], ["nocommand"], [], ["--version"],
]

# ---- sentences for `legolab solve` -----------------------------------------------------------
SENTENCES = [
    "", ";", "a", "a=", "=+1", "a=+1; a=-a", "a=+1; b=-c", "a=+1; b=+1", "b=-a; a=-b", "a=*1", "a=+1; b=-a; c=-a",
    "A=+1", "a==+1", "a=+1=b", "a=+q1", "a=+1 2", "a = val 2 ,", "a = not 1 , b = val q", "a=+1; b=" + "x" * 100_000,
    "a=+1;" * 10_000, "\x00\x01", "a=+1; b=-a; c=+b; d=+c; e=-e", "a=R1 1", "a=+1\nb=-a",
]

# ---- corrupted run-directory files ------------------------------------------------------------
def _cut(p):
    p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])


def _flip(p):
    data = bytearray(p.read_bytes())
    data[-100] ^= 0xFF
    p.write_bytes(bytes(data))


CORRUPTIONS = {
    "config-binary": ("config.yaml", lambda p: p.write_bytes(os.urandom(300))),
    "config-list": ("config.yaml", lambda p: p.write_text("- 1\n- 2\n")),
    "config-empty": ("config.yaml", lambda p: p.write_text("")),
    "config-cut": ("config.yaml", _cut),
    "config-unknown-key": ("config.yaml", lambda p: p.write_text(p.read_text() + "colour: red\n")),
    "config-other-task": ("config.yaml", lambda p: p.write_text(p.read_text().replace("group: sign", "group: d3"))),
    "metrics-cut": ("metrics.jsonl", _cut),
    "metrics-garbage": ("metrics.jsonl", lambda p: p.write_text(p.read_text() + "garbage\n")),
    "metrics-binary": ("metrics.jsonl", lambda p: p.write_bytes(os.urandom(200))),
    "metrics-list": ("metrics.jsonl", lambda p: p.write_text("[1, 2]\n")),
    "last-empty": ("checkpoints/last.safetensors", lambda p: p.write_bytes(b"")),
    "last-cut": ("checkpoints/last.safetensors", _cut),
    "last-random": ("checkpoints/last.safetensors", lambda p: p.write_bytes(os.urandom(5000))),
    "last-flipped": ("checkpoints/last.safetensors", _flip),
    "last-is-best": ("checkpoints/last.safetensors", lambda p: shutil.copy(p.parent / "best.safetensors", p)),
    "last-no-metadata": ("checkpoints/last.safetensors", lambda p: __import__("safetensors.torch").torch.save_file(
        {"model.x": torch.zeros(2)}, str(p))),
    "last-missing": ("checkpoints/last.safetensors", lambda p: p.unlink()),
    "best-flipped": ("checkpoints/best.safetensors", _flip),
}
CORRUPT_COMMANDS = {
    "eval": ["eval", "RUN", "--count", "10"], "eval-best": ["eval", "RUN", "--count", "10", "--checkpoint", "best"],
    "resume": ["train", "--resume", "RUN"], "plot": ["plot", "RUN"],
    "attention": ["analyze", "attention", "RUN", "--count", "4"],
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    import yaml

    root = tmp_path_factory.mktemp("bad-input")
    config = root / "tiny.yaml"
    config.write_text(yaml.safe_dump({**TINY, "train": {**TINY["train"], "steps": 4, "eval_every": 2, "test_size": 20}}))
    assert main(["train", str(config), "--runs", str(root / "base"), "--no-progress"]) == 0
    (root / "file.txt").write_text("not a run\n")
    (root / "dir").mkdir()
    (root / "random.json").write_bytes(os.urandom(300))
    (root / "random.yaml").write_bytes(os.urandom(300))
    (root / "table.json").write_text('{"names": ["e", "a"], "table": [[0, 1], [1, 1]]}')  # not a group
    return root


def run_case(argv, root, capsys, runs=None):
    """Run one case; returns (code, stderr) after asserting the contract."""
    runs = runs or root / "runs"
    names = {"RUN": str(root / "base" / "tiny"), "FILE": str(root / "file.txt"), "MISSING": str(root / "missing"),
             "DIR": str(root / "dir"), "CONFIG": str(root / "tiny.yaml"), "BINJSON": str(root / "random.json"),
             "BINYAML": str(root / "random.yaml"), "BADTABLE": str(root / "table.json")}
    argv = [names.get(a, a) for a in argv]
    if argv and argv[0] in ("train", "mimic", "pretrain", "reproduce", "demo") and "--runs" not in argv:
        argv += ["--runs", str(runs)]
    before = set(runs.iterdir()) if runs.exists() else set()
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as e:  # argparse: --version exits 0, a usage error exits 2
        code = e.code
    err = capsys.readouterr().err
    assert code in (0, 2), (argv, code, err)
    assert "Traceback" not in err, (argv, err)
    if code == 2:
        assert err.endswith("\n") and err.strip().splitlines()[-1].startswith(("legolab: error:", "legolab ")), (argv, err)
        assert len(err.strip().splitlines()[-1]) < 600, (argv, "error line too long")
        after = set(runs.iterdir()) if runs.exists() else set()
        assert after == before, (argv, "left behind", after - before)
    return code, err


@pytest.mark.parametrize("override", CONFIG_CASES, ids=lambda c: " ".join(c)[:60])
def test_bad_config_values(workspace, capsys, override, monkeypatch):
    monkeypatch.chdir(workspace)
    code, err = run_case(["train", "CONFIG", *TINY_TRAIN, *override], workspace, capsys)
    assert code == 2, (override, err)


@pytest.mark.parametrize("argv", CLI_CASES, ids=lambda a: " ".join(a)[:50] or "(none)")
def test_bad_command_lines(workspace, capsys, argv, monkeypatch):
    monkeypatch.chdir(workspace)
    run_case(argv, workspace, capsys)


@pytest.mark.parametrize("sentence", SENTENCES, ids=lambda s: repr(s[:20]))
def test_bad_sentences(workspace, capsys, sentence):
    code, err = run_case(["solve", sentence], workspace, capsys)
    assert code == 2 and len(err) < 400


@pytest.mark.parametrize("command", CORRUPT_COMMANDS)
@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_corrupted_run_files(workspace, capsys, tmp_path, corruption, command):
    run = tmp_path / "run"
    shutil.copytree(workspace / "base" / "tiny", run)
    name, damage = CORRUPTIONS[corruption]
    damage(run / name)
    argv = [str(run) if a == "RUN" else a for a in CORRUPT_COMMANDS[command]]
    code, err = run_case(argv, workspace, capsys, runs=tmp_path / "runs")
    if corruption in ("last-flipped", "last-random", "last-cut", "last-empty") and command in ("eval", "resume"):
        assert code == 2, err


def test_the_table_has_at_least_200_cases():
    total = len(CONFIG_CASES) + len(CLI_CASES) + len(SENTENCES) + len(CORRUPTIONS) * len(CORRUPT_COMMANDS)
    assert total >= 200, total


def test_removed_model_flags_load_at_their_old_defaults_only():
    from legolab.errors import ConfigError
    from legolab.training.config import config_from_dict

    old = {"model": {"positions": "learned", "pos_init": 1.0, "mimetic_init": False, "identity_init": 0.0}}
    assert config_from_dict(old).model.d_model == 64  # a run directory written before their removal
    with pytest.raises(ConfigError, match=r"model.pos_init: removed .* only its old default 1.0 is accepted"):
        config_from_dict({"model": {"pos_init": 0.2}})

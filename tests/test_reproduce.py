import yaml
from conftest import TINY

from legolab.cli import main
from legolab.io import read_jsonl


def write_configs(root, n=4):
    d = root / "configs" / "cpu"
    d.mkdir(parents=True)
    for stem, arch in (("bert", "bert"), ("albert", "albert")):
        data = {**TINY, "name": f"cpu-{stem}", "model": {**TINY["model"], "arch": arch},
                "task": {"group": "sign", "n": n},
                "train": {**TINY["train"], "steps": 20, "eval_every": 10}}
        (d / f"{stem}.yaml").write_text(yaml.safe_dump(data))


def test_reproduce_runs_reuses_and_summarises(tmp_path, monkeypatch, capsys):
    write_configs(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "fig3", "--seeds", "2"]) == 0
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert runs == ["cpu-albert-s0", "cpu-albert-s1", "cpu-bert-s0", "cpu-bert-s1"]
    assert yaml.safe_load((tmp_path / "runs" / "cpu-bert-s1" / "config.yaml").read_text())["seed"] == 1
    report = tmp_path / "reports" / "fig3-cpu"
    assert (report / "accuracy.png").is_file() and "| bert | 2 |" in (report / "summary.md").read_text()
    capsys.readouterr()
    # a second call reuses every finished run
    assert main(["reproduce", "fig3", "--seeds", "2"]) == 0
    assert capsys.readouterr().err.count("done, reused") == 4
    assert len(read_jsonl(tmp_path / "runs" / "cpu-bert-s0" / "metrics.jsonl")) == 2


def test_reproduce_shortcut_and_unknown_figure(tmp_path, monkeypatch, capsys):
    write_configs(tmp_path, n=12)
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "fig11", "--seeds", "1"]) == 0
    cfg = yaml.safe_load((tmp_path / "runs" / "cpu-bert-0to4+11-s0" / "config.yaml").read_text())
    assert cfg["train"]["supervise"] == [0, 1, 2, 3, 4, 11]
    summary = (tmp_path / "reports" / "fig11-cpu" / "summary.md").read_text()
    assert "| albert-0to4+11 | 1 |" in summary
    assert main(["reproduce", "fig99"]) == 2
    assert "unknown figure" in capsys.readouterr().err


def test_every_figure_resolves_to_valid_configs_at_both_scales(tmp_path, monkeypatch):
    from legolab.errors import LegoError
    from legolab.reproduce import FIGURES, runs_for
    from legolab.training.config import load_config

    monkeypatch.chdir(tmp_path)  # the shipped configs, not a checkout's
    for scale in ("cpu", "paper"):
        for fig in FIGURES:
            for _, run in runs_for(fig, scale, 2, pretrained="hf:/models/bert-base-uncased"):
                cfg = load_config(run.config, run.overrides)
                assert cfg.seed in (0, 1)
                if scale == "paper":
                    assert cfg.model.d_model == 768 and cfg.model.n_layers == 12, (fig, run.name)
                if "pretrained" in run.name:
                    assert cfg.train.init == ("minilm" if scale == "cpu" else "hf:/models/bert-base-uncased")
                    assert cfg.model.tokenizer == "wordpiece"
    try:
        runs_for("fig6", "paper", 1, pretrained=None)
    except LegoError as e:
        assert "--pretrained" in str(e)
    else:
        raise AssertionError("fig6 at paper scale must ask for --pretrained")

"""Masked-language-model pretraining (the paper's Fig. 10): BERT vs LEGO attention v0/v1.

Text is read as WordPiece ids of the bert-base-uncased vocabulary (the MiniLM package's vocab;
tokenising needs the ``hf`` extra), packed into sequences ``[CLS] ... [SEP]`` of ``seq_len``
tokens; the last ``val_fraction`` of sequences is the validation set. BERT's masking: 15% of the
tokens are chosen, 80% of those become [MASK], 10% a random token, 10% stay. The loss is
cross-entropy on the chosen tokens through a tied decoder.

Masks are functions of (seed, step), so a resumed run continues exactly. The checkpoint's
encoder weights initialise ``legolab train`` (``train.init=runs/NAME`` with
``model.tokenizer: wordpiece`` and the same model shape).

``--corpus stdlib`` builds a corpus that exists offline wherever Python does: the docstrings of
the standard library's modules, classes and functions, read with ``ast`` (nothing is imported)
from the sorted source files. It depends on the Python version (3.11 here).
"""

from __future__ import annotations

import ast
import math
import os
import signal
import sysconfig
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
import yaml
from torch import nn

from ..errors import ConfigError, Interrupted, LegoError
from ..io import read_jsonl, write_jsonl, write_text
from ..models import Encoder, ModelConfig
from ..models.tokenizer import BERT_CLS, BERT_MASK, BERT_PAD, BERT_SEP, BERT_VOCAB_SIZE
from .checkpoint import load_model_weights, model_weights, read_checkpoint, restore_training_state, save_checkpoint
from .config import _build, _coerce, apply_overrides, read_config_file, validate_name_and_seed
from .rundir import RunDir
from .schedule import SCHEDULES, lr_factor
from .step import machine_label, make_optimizer
from .trainer import _Signals

CLS, SEP, MASK, PAD, VOCAB = BERT_CLS, BERT_SEP, BERT_MASK, BERT_PAD, BERT_VOCAB_SIZE


@dataclass
class PretrainConfig:
    corpus: str = "stdlib"        # stdlib, a .txt file, or a directory of .txt files
    seq_len: int = 128
    mask_prob: float = 0.15
    val_fraction: float = 0.02
    val_sequences: int = 256      # at most this many validation sequences are scored
    batch_size: int = 32
    steps: int = 2000
    eval_every: int = 100
    lr: float = 5e-4
    warmup: float = 0.05
    schedule: str = "cosine"      # cosine | linear | constant, after warmup (training/schedule.py)
    min_lr: float = 0.0           # the schedule's floor, as a fraction of lr
    weight_decay: float = 0.01
    clip: float = 1.0
    threads: int = 0

    def validate(self) -> None:
        def bad(key, why):
            raise ConfigError(f"pretrain.{key}: {why}, got {getattr(self, key)!r}")

        if not 8 <= self.seq_len <= 512:
            bad("seq_len", "must be between 8 and 512")
        if not 0 < self.mask_prob < 1:
            bad("mask_prob", "must be in (0, 1)")
        if not 0 < self.val_fraction < 0.5:
            bad("val_fraction", "must be in (0, 0.5)")
        for key in ("batch_size", "steps", "eval_every", "val_sequences"):
            if getattr(self, key) < 1:
                bad(key, "must be a positive integer")
        if not self.lr > 0:
            bad("lr", "must be positive")
        for key in ("weight_decay", "clip", "warmup", "threads"):
            if getattr(self, key) < 0:
                bad(key, "must be non-negative")
        if self.schedule not in SCHEDULES:
            bad("schedule", f"must be one of {', '.join(SCHEDULES)}")
        if not 0 <= self.min_lr <= 1:
            bad("min_lr", "must be a fraction of lr in [0, 1]")


@dataclass
class PretrainRun:
    name: str = "pretrain"
    seed: int = 0
    model: ModelConfig = field(default_factory=lambda: ModelConfig(n_layers=4, d_model=128, n_heads=4, norm="pre",
                                                                   tokenizer="wordpiece", max_len=128))
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)

    def to_dict(self) -> dict:
        return asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @staticmethod
    def from_dict(data: dict) -> PretrainRun:
        for key in data:
            if key not in ("name", "seed", "model", "pretrain"):
                raise ConfigError(f"{key}: unknown key (known: model, name, pretrain, seed)")
        run = PretrainRun(name=_coerce(data.get("name", "pretrain"), str, "name"),
                          seed=_coerce(data.get("seed", 0), int, "seed"),
                          model=_build(ModelConfig, {**asdict(PretrainRun().model), **(data.get("model") or {})}, "model."),
                          pretrain=_build(PretrainConfig, data.get("pretrain") or {}, "pretrain."))
        validate_name_and_seed(run.name, run.seed)
        run.model.validate()
        run.pretrain.validate()
        if run.model.tokenizer != "wordpiece":
            raise ConfigError("model.tokenizer: masked-LM pretraining reads word pieces (wordpiece)")
        if run.model.max_len < run.pretrain.seq_len:
            raise ConfigError(f"model.max_len: {run.model.max_len} is shorter than pretrain.seq_len={run.pretrain.seq_len}")
        return run


def load_pretrain_config(path, overrides) -> PretrainRun:
    data = read_config_file(path) if path else {}
    return PretrainRun.from_dict(apply_overrides(data, list(overrides)))


# ---- corpus ---------------------------------------------------------------------------------
def stdlib_docstrings() -> list[str]:
    """Docstrings of the standard library, in a fixed order (sorted files, source order)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = ("site-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__", "turtledemo", "ensurepip")
    texts = []
    for path in sorted(root.rglob("*.py")):
        if any(part in skip for part in path.relative_to(root).parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 40:
                    texts.append(doc)
    return texts


def read_corpus(spec: str) -> list[str]:
    if spec == "stdlib":
        return stdlib_docstrings()
    path = Path(spec)
    files = sorted(path.rglob("*.txt")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise LegoError(f"pretrain.corpus: {spec!r} is not 'stdlib', a text file or a directory of .txt files")
    return [t for f in files for t in f.read_text(encoding="utf-8", errors="replace").split("\n\n") if t.strip()]


def corpus_sequences(spec: str, seq_len: int) -> torch.Tensor:
    """(N, seq_len) packed WordPiece sequences [CLS] ... [SEP]."""
    try:
        from transformers import BertTokenizer
    except ImportError:
        raise LegoError("pretrain: tokenising text needs transformers (pip install 'legolab[hf]')") from None
    from ..models.tokenizer import minilm_path

    tok = BertTokenizer.from_pretrained(str(minilm_path()))
    tok.model_max_length = 1 << 30  # we pack long texts ourselves
    texts = read_corpus(spec)
    ids: list[int] = []
    for chunk in range(0, len(texts), 512):
        for seq in tok(texts[chunk:chunk + 512], add_special_tokens=False)["input_ids"]:
            ids.extend(seq)
            ids.append(SEP)
    body = seq_len - 2
    n = len(ids) // body
    if n < 10:
        raise LegoError(f"pretrain.corpus: {spec!r} is too small ({len(ids)} word pieces)")
    t = torch.tensor(ids[:n * body], dtype=torch.long).view(n, body)
    return torch.cat([torch.full((n, 1), CLS), t, torch.full((n, 1), SEP)], 1)


def mask_tokens(x: torch.Tensor, prob: float, generator: torch.Generator):
    """BERT's masking; returns (inputs, labels with -100 where not chosen)."""
    special = (x == CLS) | (x == SEP) | (x == PAD)
    chosen = (torch.rand(x.shape, generator=generator) < prob) & ~special
    labels = torch.where(chosen, x, torch.full_like(x, -100))
    r = torch.rand(x.shape, generator=generator)
    inputs = torch.where(chosen & (r < 0.8), torch.full_like(x, MASK), x)
    random_tok = torch.randint(1000, VOCAB, x.shape, generator=generator)
    inputs = torch.where(chosen & (r >= 0.8) & (r < 0.9), random_tok, inputs)
    return inputs, labels


class MaskedLM(nn.Module):
    """Encoder + BERT's prediction head (transform, then the word embeddings as decoder)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.encoder = Encoder(cfg, VOCAB, special_ids=(CLS, SEP))
        self.transform = nn.Linear(cfg.d_model, cfg.embed)
        self.norm = nn.LayerNorm(cfg.embed, eps=cfg.ln_eps)
        self.bias = nn.Parameter(torch.zeros(VOCAB))

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        h = self.encoder(x)
        picked = h[labels >= 0]
        z = self.norm(F.gelu(self.transform(picked)))
        logits = z @ self.encoder.embed.tok.weight.T + self.bias
        return F.cross_entropy(logits, labels[labels >= 0])


def pretrain(run: PretrainRun, run_dir: str | Path, resume: bool = False, log=print) -> list[dict]:
    """Masked-LM pretraining in ``run_dir`` (claimed, published and locked like a training run:
    training/rundir.py); ``resume`` continues from the last checkpoint exactly."""
    run_dir = Path(run_dir)
    rd = RunDir.resume(run_dir) if resume else RunDir.create(run_dir)
    try:
        return _pretrain(run, rd, resume, log)
    except BaseException:
        rd.discard()  # only a directory that was never published
        raise
    finally:
        rd.close()


def _pretrain(run: PretrainRun, rd: RunDir, resume: bool, log) -> list[dict]:
    pc = run.pretrain
    torch.set_num_threads(pc.threads or (os.cpu_count() or 1))
    machine = machine_label(torch.device("cpu"))
    torch.manual_seed(run.seed)
    data = corpus_sequences(pc.corpus, pc.seq_len)
    n_val = max(1, int(len(data) * pc.val_fraction))
    train, val = data[:-n_val], data[-n_val:][:pc.val_sequences]
    val_gen = torch.Generator().manual_seed(run.seed + 77)
    val_batches = [mask_tokens(val[i:i + pc.batch_size], pc.mask_prob, val_gen) for i in range(0, len(val), pc.batch_size)]
    model = MaskedLM(run.model)
    opt = make_optimizer(model, pc.lr, pc.weight_decay)

    step, records, elapsed = 0, [], 0.0
    ckpt = rd / "checkpoints" / "last.safetensors"  # the path before publish(): saves below ask rd again
    if resume:
        if not ckpt.is_file():
            raise LegoError(f"{rd.path}: nothing to resume, no checkpoint yet")
        tensors, meta = read_checkpoint(ckpt)
        if meta.get("kind") != "pretrain":
            raise LegoError(f"{rd.path}: not a pretraining run")
        load_model_weights(model, model_weights(tensors), str(ckpt))
        restore_training_state(tensors, meta, opt, "cpu")
        step, elapsed = meta["step"], meta.get("elapsed", 0.0)
        records = [r for r in read_jsonl(rd / "metrics.jsonl") if r["step"] <= step]
    else:
        write_text(rd / "config.yaml", run.to_yaml())
        write_jsonl(rd / "metrics.jsonl", [])
        save_checkpoint(ckpt, model, {"step": 0, "elapsed": 0.0, "kind": "pretrain", "config": asdict(run)}, opt)
        rd.publish()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, pc.steps, pc.warmup, pc.schedule, pc.min_lr),
                                              last_epoch=step - 1)
    log(f"{run.name}: {run.model.attention} {run.model.n_layers}x{run.model.d_model}, "
        f"{model.encoder.num_parameters(exclude_embeddings=True):,} parameters without embeddings; "
        f"{len(train):,} training and {len(val):,} validation sequences of {pc.seq_len} word pieces")
    t0 = time.perf_counter()
    with _Signals() as signals:
        while step < pc.steps:
            g = torch.Generator().manual_seed(run.seed * 1_000_003 + step)
            idx = torch.randint(0, len(train), (pc.batch_size,), generator=g)
            inputs, labels = mask_tokens(train[idx], pc.mask_prob, g)
            loss = model(inputs, labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if pc.clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), pc.clip, foreach=True)
            opt.step()
            sched.step()
            step += 1
            evaluate = step % pc.eval_every == 0 or step == pc.steps
            if not evaluate and signals.caught is None:
                continue
            elapsed += time.perf_counter() - t0
            if evaluate:
                model.eval()
                with torch.no_grad():
                    val_loss = sum(float(model(x, y)) * int((y >= 0).sum()) for x, y in val_batches) / \
                        sum(int((y >= 0).sum()) for _, y in val_batches)
                model.train()
                if not math.isfinite(loss.item()):
                    raise LegoError(f"{rd.path}: the training loss became non-finite before step {step}; "
                                    f"the last good checkpoint is step {records[-1]['step'] if records else 0}")
                records.append({"step": step, "time": round(elapsed, 3), "train_loss": loss.item(),
                                "val_loss": val_loss, "machine": machine})
                # metrics first: a kill in between leaves a record past the checkpoint, which resume drops
                write_jsonl(rd / "metrics.jsonl", records)
                log(f"step {step:>6d}/{pc.steps}  {elapsed:7.1f}s  train loss {loss.item():.3f}  "
                    f"validation loss {val_loss:.3f}")
            save_checkpoint(rd / "checkpoints" / "last.safetensors", model,
                            {"step": step, "elapsed": elapsed, "kind": "pretrain", "config": asdict(run)}, opt)
            if signals.caught is not None and step < pc.steps:  # between evaluations too: no step is lost
                raise Interrupted(signals.caught, f"{rd.path}: pretraining stopped at step {step:,} of {pc.steps:,} "
                                                  f"({signal.Signals(signals.caught).name}), checkpoint saved; "
                                                  f"continue with: legolab pretrain --resume {rd.path}")
            t0 = time.perf_counter()
    return records


def encoder_weights_from_pretraining(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The encoder's weights (``model.encoder.*``) of a pretraining checkpoint, renamed for Encoder."""
    prefix = "model.encoder."
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}

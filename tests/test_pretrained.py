"""Local ALBERT checkpoints (SentencePiece vocabulary, gelu_new) load exactly, like BERT's."""

import importlib.util
import json
import struct

import pytest
import torch

from legolab.cli import main

needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                        reason="needs transformers (make test installs it)")
SP = "\u2581"


def sentencepiece_bytes(pieces):
    """A SentencePiece ModelProto with ``pieces`` (field 1: piece, 2: score, 3: type)."""
    def varint(n):
        out = b""
        while True:
            out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
            n >>= 7
            if not n:
                return out

    def field(number, payload):
        return varint(number << 3 | 2) + varint(len(payload)) + payload

    msgs = [field(1, p.encode()) + varint(2 << 3 | 5) + struct.pack("<f", -float(i)) + varint(3 << 3) + varint(1)
            for i, p in enumerate(pieces)]
    return b"".join(field(1, m) for m in msgs) + field(2, b"\x08\x01")  # + a trainer spec, ignored


def albert_pieces(size=30000):
    named = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]", *(SP + c for c in "abcdefghijklmnopqrstuvwxyz"),
             SP + "=", SP + ";", "=", ";", SP + "+", "-", SP + "1"]
    return named + [f"{SP}w{i}" for i in range(size - len(named))]


def test_sentencepiece_model_reader_and_spelling():
    from legolab.models.tokenizer import sentencepiece_pieces, spelling
    from legolab.tasks import LegoConfig, LegoTask

    pieces = albert_pieces(200)
    assert sentencepiece_pieces(sentencepiece_bytes(pieces)) == pieces
    vocab = {p: i for i, p in enumerate(pieces)}
    task = LegoTask(LegoConfig(n=6))
    spelled = dict(zip(task.vocab.tokens, spelling(task.vocab.tokens, vocab, sentencepiece=True)))
    assert spelled["[PAD]"] == "<pad>" and spelled["[BOS]"] == "[CLS]" and spelled["a"] == SP + "a"
    assert spelled["="] == SP + "=" and spelled["-"] == "-" and len(set(spelled.values())) == len(spelled)
    from legolab.errors import LegoError

    with pytest.raises(LegoError, match="not a SentencePiece model"):
        sentencepiece_pieces(b"\x0a\x05ab")


@pytest.fixture
def albert_dir(tmp_path):
    from transformers import AlbertConfig, AlbertModel

    torch.manual_seed(0)
    cfg = AlbertConfig(vocab_size=30000, embedding_size=16, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                       intermediate_size=64, max_position_embeddings=128, hidden_act="gelu_new")
    model = AlbertModel(cfg).eval()
    path = tmp_path / "albert-tiny"
    model.save_pretrained(path, safe_serialization=True)
    (path / "spiece.model").write_bytes(sentencepiece_bytes(albert_pieces()))
    return path, model


@needs_transformers
def test_albert_checkpoint_hidden_states_equal_transformers(albert_dir):
    from legolab.training.runs import load_source

    path, ref = albert_dir
    _, task, model = load_source(f"hf:{path}", task={"name": "lego", "n": 12})
    assert model.cfg.arch == "albert" and model.cfg.activation == "gelu_tanh" and model.embed.tok.weight.shape[0] == 30000
    x = torch.from_numpy(task.sample("test", range(4)).tokens).long()
    with torch.no_grad():
        theirs = ref(input_ids=model.input_map[x]).last_hidden_state
        ours = model.hidden(x)
    assert (ours - theirs).abs().max() <= 1e-5


@needs_transformers
def test_train_from_a_local_albert_checkpoint_and_the_refusals(albert_dir, tmp_path, capsys):
    import yaml
    from conftest import TINY

    path, _ = albert_dir
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    shape = ["model.arch=albert", "model.n_layers=3", "model.d_model=32", "model.n_heads=4", "model.d_ff=64",
             "model.d_embed=16", "model.max_len=128", "model.norm=post", f"train.init=hf:{path}", "task.n=4",
             "train.n_tr=4", "train.steps=4", "train.eval_every=4", "train.test_size=50", "train.threads=1"]
    args = ["train", str(tmp_path / "tiny.yaml"), "--runs", str(tmp_path / "runs"), "--no-progress"]
    # bert-base-uncased's word pieces do not fit ALBERT's 30,000
    assert main([*args, *shape, "model.tokenizer=wordpiece", "model.activation=gelu_tanh", "--name", "a"]) == 2
    err = capsys.readouterr().err
    assert "vocabulary of 30000 pieces, the model embeds 30522" in err and f"hf:{path}" in err
    assert main([*args, *shape, f"model.tokenizer=hf:{path}", "--name", "b"]) == 2
    assert "model.activation=gelu_tanh" in capsys.readouterr().err
    assert main([*args, *shape, f"model.tokenizer=hf:{path}", "model.activation=gelu_tanh", "--name", "c"]) == 0
    records = [json.loads(line) for line in (tmp_path / "runs" / "c" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["step"] == 4

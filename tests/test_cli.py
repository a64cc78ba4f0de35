import json
import subprocess
import sys

import pytest

from legolab.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_generate_text_and_jsonl_agree_with_solve(capsys):
    code, out, _ = run(capsys, "generate", "--n", "6", "--count", "4", "--seed", "3")
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) == 4
    sentence, answers = lines[0].split("\t")
    code, solved, _ = run(capsys, "solve", sentence)
    assert code == 0
    assert [l.split()[1] + ":" + l.split()[3] for l in solved.strip().splitlines()] == answers.split()
    code, out, _ = run(capsys, "generate", "--n", "6", "--count", "4", "--seed", "3", "--format", "jsonl")
    rec = json.loads(out.splitlines()[0])
    assert rec["sentence"] == sentence and sorted(rec["index"]) == list(range(6))
    assert rec["positions"] == [1, 6, 11, 16, 21, 26] and len(rec["tokens"]) == 32


def test_generate_to_file_and_code_notation(capsys, tmp_path):
    out = tmp_path / "d3.jsonl"
    code, _, err = run(capsys, "generate", "--group", "d3", "--count", "25", "--format", "jsonl", "--out", str(out))
    assert code == 0 and "wrote 25" in err
    assert len(out.read_text().splitlines()) == 25
    code, text, _ = run(capsys, "generate", "--notation", "code", "--count", "1", "--n", "3")
    assert " = val " in text or " = not " in text


@pytest.mark.parametrize("argv,message", [
    (["solve", "a=+1; b=-c"], "variable 'c' is used but never assigned"),
    (["solve", "a=+1", "--group", "q9"], "unknown group"),
    (["generate", "--n", "0"], "task.n"),
    (["generate", "--group", "d3", "--notation", "code"], "only defined for the sign group"),
])
def test_errors_are_one_line_with_status_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("legolab: error: ") and message in err


def test_console_script_bad_argument_is_one_line():
    p = subprocess.run([sys.executable, "-m", "legolab", "generate", "--n", "x"], capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "invalid int value" in p.stderr
    p = subprocess.run([sys.executable, "-m", "legolab", "solve", "a=+1;b=-a;c=+b"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.splitlines()[-1] == "#2 c = -1"


def test_tasks_lists_groups(capsys):
    code, out, _ = run(capsys, "tasks")
    assert code == 0 and "lego" in out and "d3" in out

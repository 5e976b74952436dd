"""torchcourse.compiling: a missing C++ compiler is a sentence, not a traceback; torch's logs are cut to their first lines."""

import torch
import torch._dynamo as dynamo

from torchcourse import compiling, timing


def test_inductor_problem_is_none_where_a_compiler_is_found_and_a_sentence_where_none_is(monkeypatch):
    import torch._inductor.config as inductor_config
    assert compiling.inductor_problem("cpu") is None  # this machine has g++ (FACTS.md); Inductor runs in 05's lesson
    monkeypatch.setattr(inductor_config.cpp, "cxx", (None, "no-such-c++-compiler"))
    problem = compiling.inductor_problem("cpu")
    assert problem and "no working C++ compiler" in problem and "apt install g++" in problem
    assert "not on mps" in compiling.inductor_problem("mps")


def test_first_call_seconds_waits_for_the_device_around_the_call(monkeypatch):
    events = []
    monkeypatch.setattr(timing, "synchronize", lambda device: events.append("sync"))  # time_it's, which it calls
    seconds = compiling.first_call_seconds(lambda x: events.append(x), "call", device="cpu")
    assert events == ["sync", "call", "sync"] and seconds >= 0


def test_torch_logs_prints_the_first_lines_of_a_graph_break_and_a_recompile_then_goes_quiet(capsys):
    def branchy(x):
        return x * 2 if x.sum() > 0 else x  # a Python branch on a tensor's value: a graph break

    dynamo.reset()
    fn = torch.compile(branchy, backend="eager")
    with compiling.torch_logs(lines=2, graph_breaks=True, recompiles=True):
        fn(torch.ones(3))
        fn(torch.ones(4))  # a new shape: a recompile
    inside = capsys.readouterr()
    fn(torch.ones(5))
    after = capsys.readouterr()
    messages = [line for line in inside.out.splitlines() if line.startswith("  [log] ")]
    assert any("Graph break in user code" in m for m in messages), inside.out
    assert any("Recompiling function branchy" in m for m in messages), inside.out
    assert "Graph Break Reason" in inside.out and "User code traceback" not in inside.out  # cut to 2 lines per message
    assert inside.err == "" and after.out == "" and "[log]" not in after.err
    dynamo.reset()

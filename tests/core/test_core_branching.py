"""Branching: direct, real process forks, action replay, resolution and release."""

import os

import pytest
from envs_for_core_tests import CounterEnv, NoForkSpecEnv, PureEnv

from twinkle.core import Action
from twinkle.core.branching import (
    ActionReplayStrategy,
    BranchingStrategy,
    BranchManager,
    DirectStrategy,
    ForkedEnvironment,
    ProcessForkStrategy,
    resolve_strategy,
)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); look at its state.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_resolution_order():
    assert resolve_strategy(PureEnv()).name == "direct"
    assert resolve_strategy(CounterEnv()).name == "process_fork"
    assert resolve_strategy(CounterEnv(), preference="direct").name == "direct"  # honoured
    assert (
        resolve_strategy(CounterEnv(), preference="action_replay", env_factory=CounterEnv).name
        == "action_replay"
    )
    with pytest.raises(ValueError, match="Unknown branching strategy"):
        resolve_strategy(CounterEnv(), preference="magic")
    with pytest.raises(ValueError, match="env_factory"):
        resolve_strategy(CounterEnv(), preference="action_replay")
    for s in (DirectStrategy(), ProcessForkStrategy(), ActionReplayStrategy(CounterEnv)):
        assert isinstance(s, BranchingStrategy)
    assert not DirectStrategy().can_branch(object())
    assert not ActionReplayStrategy(CounterEnv).can_branch(NoForkSpecEnv())


def test_direct_strategy_returns_same_objects():
    env = PureEnv()
    s0, _ = env.reset()
    with BranchManager.create(env) as mgr:
        mgr.checkpoint("start", s0)
        b_env, b_state = mgr.branch("start")
        assert b_env is env and b_state is s0
        one = env.step(b_state, Action.from_text("1")).next_state
        two = env.step(b_state, Action.from_text("2")).next_state  # pure: any prior state works
        assert (one.hidden.total, two.hidden.total) == (1, 2)
    assert mgr.names == ()


def test_non_pure_env_rejects_stale_state():
    env = CounterEnv()
    s0, _ = env.reset()
    s1 = env.step(s0, Action.from_text("1")).next_state
    env.step(s1, Action.from_text("1"))
    with pytest.raises(NotImplementedError, match="stale state"):
        env.step(s1, Action.from_text("1"))
    other, _ = CounterEnv().reset(options={"task_index": 2})
    with pytest.raises(NotImplementedError, match="different episode"):
        env.step(other, Action.from_text("1"))


def test_process_fork_real_processes():
    env = CounterEnv()
    s0, _ = env.reset(options={"task_index": 1})
    s1 = env.step(s0, Action.from_text("2")).next_state
    assert env.counter == 1
    with BranchManager.create(env) as mgr:
        assert mgr.strategy.name == "process_fork"
        mgr.checkpoint("after-1", s1)
        e1, st1 = mgr.branch("after-1")
        e2, st2 = mgr.branch("after-1")
        assert isinstance(e1, ForkedEnvironment) and st1 == s1
        r1 = e1.step(st1, Action.from_text("5"))
        r2 = e2.step(st2, Action.from_text("1"))
        # Internal mutable state was inherited (counter 1 -> 2) and branches are independent.
        assert r1.info["counter"] == 2 and r2.info["counter"] == 2
        assert (r1.next_state.hidden.total, r2.next_state.hidden.total) == (8, 4)
        pids = {r1.info["pid"], r2.info["pid"], os.getpid()}
        assert len(pids) == 3
        # The remote env keeps its own continuity rules.
        with pytest.raises(NotImplementedError, match="stale state"):
            e1.step(st1, Action.from_text("1"))
        assert e1.spec.name == "counter" and len(e1) == 4 and e1.prompts == {"system": "count"}
        assert e1.available_tools[0].name == "add" and e1.reward_functions == ()
        assert e1.compute_rewards(st1, Action.from_text("1"), r1.next_state).total == 5.0
        assert e1.call("__len__") == 4
        # The parent's environment is untouched.
        assert env.counter == 1
        env.step(s1, Action.from_text("1"))
        branch_pids = [int(r1.info["pid"]), int(r2.info["pid"])]
        checkpoint_pid = mgr.strategy._checkpoints[mgr._handles["after-1"].checkpoint_id][0].pid
    for pid in (*branch_pids, checkpoint_pid):
        assert not _alive(pid)
    with pytest.raises(RuntimeError, match="closed"):
        e1.step(st1, Action.from_text("1"))


def test_process_fork_nested_branches():
    env = CounterEnv()
    s0, _ = env.reset()
    with BranchManager.create(env, strategy="process_fork") as outer:
        outer.checkpoint("root", s0)
        branch_env, state = outer.branch("root")
        s1 = branch_env.step(state, Action.from_text("3")).next_state
        with BranchManager.create(branch_env) as inner:
            inner.checkpoint("deeper", s1)
            deep_env, deep_state = inner.branch("deeper")
            result = deep_env.step(deep_state, Action.from_text("4"))
            assert result.next_state.hidden.total == 7 and result.info["counter"] == 2
            deep_pid = result.info["pid"]
        assert not _alive(deep_pid)
        # The outer branch still works after the inner manager released its checkpoint.
        assert branch_env.step(s1, Action.from_text("1")).next_state.hidden.total == 4


def test_remote_errors_come_back_as_exceptions():
    env = CounterEnv()
    s0, _ = env.reset()
    with BranchManager.create(env) as mgr:
        mgr.checkpoint("c", s0)
        b, st = mgr.branch("c")
        with pytest.raises(AttributeError):
            b.call("no_such_method")
        with pytest.raises(ValueError, match="boom"):
            b.call("explode")
        with pytest.raises(RuntimeError, match="could not be sent"):
            b.call("make_lock")
        assert b.step(st, Action.from_text("1")).next_state.hidden.total == 1  # still serving


def test_action_replay():
    made = []

    def factory():
        made.append(CounterEnv())
        return made[-1]

    env = CounterEnv()
    s0, _ = env.reset(seed=7, options={"task_index": 2})
    actions = (Action.from_text("1"), Action.from_text("2"))
    state = s0
    for a in actions:
        state = env.step(state, a).next_state
    with BranchManager.create(env, strategy="action_replay", env_factory=factory) as mgr:
        mgr.checkpoint("two", state, actions=actions, reset_options={"seed": 7, "task_index": 2})
        b1, st1 = mgr.branch("two")
        b2, st2 = mgr.branch("two")
        assert b1 is not b2 and b1 is not env
        assert st1.hidden.total == state.hidden.total == 5 and st1.metadata.step == 2
        assert b1.counter == 2  # replayed, cost O(K)
        assert b1.step(st1, Action.from_text("1")).next_state.hidden.total == 6
        assert st1.metadata.episode_id == "ep-7-2"
    assert all(e.closed for e in made)


def test_manager_names_release_and_errors():
    env = PureEnv()
    s0, _ = env.reset()
    mgr = BranchManager.create(env)
    mgr.checkpoint("a", s0)
    first = mgr._handles["a"]
    mgr.checkpoint("a", s0)  # re-using a name releases the old handle
    assert mgr._handles["a"] is not first and first.checkpoint_id not in mgr.strategy._saved
    with pytest.raises(KeyError, match="Checkpoint 'b' not found"):
        mgr.branch("b")
    with pytest.raises(KeyError):
        mgr.release("b")
    mgr.release("a")
    assert mgr.names == ()
    mgr.close()


def test_no_strategy_fits_without_fork(monkeypatch):
    monkeypatch.setattr(ProcessForkStrategy, "can_branch", lambda self, env: False)
    with pytest.raises(NotImplementedError, match="no branching strategy fits"):
        resolve_strategy(NoForkSpecEnv())
    with pytest.raises(ValueError, match="env_factory"):
        resolve_strategy(CounterEnv())
    assert resolve_strategy(CounterEnv(), env_factory=CounterEnv).name == "action_replay"
    with pytest.raises(NotImplementedError):
        resolve_strategy(CounterEnv(), preference="process_fork")


def test_atexit_releases_forgotten_forks(tmp_path):
    import subprocess
    import sys
    import time

    script = tmp_path / "forget.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(os.path.dirname(__file__))!r})\n"
        "from envs_for_core_tests import CounterEnv\n"
        "from twinkle.core import Action\n"
        "from twinkle.core.branching import BranchManager\n"
        "env = CounterEnv(); s, _ = env.reset()\n"
        "mgr = BranchManager.create(env); mgr.checkpoint('c', s)\n"
        "b, st = mgr.branch('c')\n"
        "print(b.step(st, Action.from_text('1')).info['pid'], flush=True)\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.strip())
    for _ in range(500):  # the orphan is reaped by init once it exits
        if not _alive(pid):
            break
        time.sleep(0.01)
    assert not _alive(pid)

"""DeadLoopFilter: markers in four languages, think vs response profiles, agent rows."""

import json

import pytest

from twinkle.preprocessor.dead_loop_filter import DeadLoopFilter

LOOPS = {
    "en": "Wait... no wait, that's not right. Hmm, let me try again. Actually no, I was wrong. "
    "Oh wait, I'm getting confused. Hmm... wait, let me reconsider. ",
    "zh": "等等，不对，让我重新想想。嗯嗯，我又搞错了。呃，我好像弄错了。我有点搞不清楚了。",
    "ja": "えっと、ちょっと待って。うーん、もう一度考え直します。いや待って、混乱してきた。",
    "ko": "잠깐만요... 음... 다시 생각해 볼게요. "
    "어... 잠깐, 헷갈려서 다시 해 보겠습니다. 계속 틀리네요.",
}
CLEAN = {
    "en": "I ran the command in the sandbox, so the value above is exactly what python3 printed. "
    "You can await the next step once the file is in place; wait for the write to finish first. "
    "Hmm, one detail: the path is absolute, so the working directory does not matter.",
    "zh": "我是在沙箱里实际运行的命令，所以上面的值就是 python3 的原始输出。"
    "嗯，还有一点：路径是绝对路径，所以工作目录不影响结果。"
    "以后如果要再检查，可以直接重新运行这条命令，它没有副作用。",
    "ja": "コマンドはサンドボックスで実際に実行したので、"
    "上の値は python3 が表示したそのままです。えっと、補足すると、"
    "パスは絶対パスなので作業ディレクトリは関係ありません。",
    "ko": "다음 단계에서는 결과를 파일로 저장할 수 있어요. "
    "음식 주문 데이터도 같은 방식으로 정리했습니다. "
    "음, 한 가지 덧붙이면 경로가 절대 경로라서 작업 디렉터리는 상관없어요. "
    "어떻게 실행했는지도 위에 적어 두었습니다.",
}


def convo(*assistants, agent=False):
    msgs = [{"role": "user", "content": "Compute 17*23 in the sandbox, please."}]
    for a in assistants:
        msg = dict(a) if isinstance(a, dict) else {"role": "assistant", "content": a}
        msg.setdefault("role", "assistant")
        msgs.append(msg)
        if agent:
            msgs[-1].setdefault(
                "tool_calls",
                [
                    {
                        "id": f"c{len(msgs)}",
                        "type": "function",
                        "function": {
                            "name": "run_command",
                            "arguments": json.dumps({"command": f"echo {len(msgs)}"}),
                        },
                    }
                ],
            )
            msgs.append(
                {"role": "tool", "tool_call_id": f"c{len(msgs)}", "content": str(len(msgs))}
            )
    return {"messages": msgs}


def reason(r, **kw):
    _kept, dropped = DeadLoopFilter(**kw)([r])
    return dropped[0]["drop_reason"] if dropped else None


@pytest.mark.parametrize("lang", sorted(LOOPS))
def test_response_loops_are_dropped_in_every_language(lang):
    assert reason(convo(LOOPS[lang] * 2)) == "dead_loop"


@pytest.mark.parametrize("lang", sorted(CLEAN))
def test_clean_text_with_single_markers_is_kept(lang):
    assert reason(convo(CLEAN[lang])) is None


def test_short_reply_with_one_hmm_is_kept():
    assert reason(convo("Hmm, the answer is 42 because 6*7 is 42.")) is None
    assert reason(convo("Wait, 391 is right.")) is None


def test_korean_um_eo_only_as_interjections():
    prose = (
        "다음 단계로 진행할 수 있어. 음식은 어떻게 만들어요? 있어요. "
        "어디에 저장했는지 다음에 알려 드릴게요. " * 5
    )
    assert reason(convo(prose)) is None
    stutter = "음... 어... 음. 어? 음... 이게 맞나. " * 4
    assert reason(convo(stutter)) == "dead_loop"


def test_think_profile_is_laxer_than_response_profile():
    # Three markers in ~260 characters: above the response density (7/1000), below think (15/1000).
    text = (
        "Hmm, let me check the product first. The sandbox prints 391 for 17 times 23, which "
        "matches the estimate of about 400. Wait, that's wrong about the estimate, it is 391 "
        "exactly. Hmm, fine, the tool output is what matters here and I will report it as is."
    )
    f = DeadLoopFilter()
    assert f.segment_stuck(text) is True
    assert f.segment_stuck(text, think=True) is False
    assert reason(convo({"content": "391", "reasoning_content": text})) is None
    assert reason(convo(f"<think>{text}</think>391")) is None
    assert reason(convo(f"<think>plan</think>{text}")) == "dead_loop"


def test_text_before_the_think_block_is_response():
    assert reason(convo(LOOPS["en"] * 2 + "<think>fine</think>391")) == "dead_loop"


def test_repetitive_think_block_is_dropped():
    block = (
        "The user wants the product of two numbers so I will run python3 in the sandbox and "
        "print it. "
    )
    assert reason(convo({"content": "391", "reasoning_content": block * 12})) == "dead_loop"
    zh = "用户想要两个数的乘积，所以我在沙箱里运行 python3 并打印结果。"
    assert reason(convo(f"<think>{zh * 20}</think>391")) == "dead_loop"


def test_repetitive_response_is_dropped_and_varied_text_kept():
    assert reason(convo("The file is written and the output is verified. " * 12)) == "dead_loop"
    varied = " ".join(
        f"Step {i} checks item {i * 7} against bucket {i % 5} and logs the outcome."
        for i in range(40)
    )
    assert reason(convo(varied)) is None


def test_cascade_of_corrections_in_a_long_answer():
    filler = "The computation uses integer arithmetic and the result is exact for these inputs. "
    cascade = (
        "Wait, actually. Hmm. Actually that holds. Wait, the sum is fine. I was wrong before. "
    )
    assert reason(convo(filler * 20 + cascade)) == "dead_loop"


def test_agent_rows_with_one_stuck_turn_are_dropped():
    # Issue 12: the seed's two-turn rule found 0% of the loops in tool-using rows.
    one = convo(LOOPS["en"] * 2, "Running it.", "Done: 391.", agent=True)
    assert reason(one) == "dead_loop"
    two = convo(LOOPS["en"] * 2, LOOPS["zh"] * 2, "Done: 391.", agent=True)
    assert reason(two) == "dead_loop"
    assert reason(one, agent_min_stuck_turns=2) is None  # the seed's threshold


def test_agent_repeating_the_same_reply_every_turn_is_a_loop():
    same = "Let me run the test suite again to see whether it passes now."
    looping = convo(same, same, same, "Done: 391.", agent=True)
    assert reason(looping) is None  # off by default: agents repeat boilerplate legitimately
    assert reason(looping, max_repeated_turn_texts=3) == "dead_loop"
    varied = convo(
        same,
        "The first failure is in parse(); fixing the off-by-one.",
        same,
        "Done: 391.",
        agent=True,
    )
    assert reason(varied, max_repeated_turn_texts=3) is None
    assert reason(looping, max_repeated_turn_texts=4) is None


def test_repeated_identical_tool_calls_with_identical_outputs():
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "run_command", "arguments": '{"command": "ls"}'},
    }
    msgs = [{"role": "user", "content": "List the files in my home directory."}]
    for i in range(4):
        msgs.append(
            {
                "role": "assistant",
                "content": "Let me list them.",
                "tool_calls": [dict(call, id=f"c{i}")],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": "notes.txt"})
    assert reason({"messages": msgs}) == "tool_call_loop"
    # Same call, different outputs (the agent changed something in between): not a loop.
    for i, m in enumerate(msgs):
        if m["role"] == "tool":
            m["content"] = f"notes.txt\nrun{i}.log"
    assert reason({"messages": msgs}) is None


def test_rows_without_assistant_are_kept_and_bad_arguments_raise():
    assert reason({"messages": [{"role": "user", "content": "hello there"}]}) is None
    with pytest.raises(ValueError, match="ngram_size"):
        DeadLoopFilter(ngram_size=0)

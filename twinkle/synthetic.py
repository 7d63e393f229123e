"""Seeded generator of realistic agent conversations, clean or with labelled defects.

Standard library only (``random.Random`` with an explicit seed, ``hashlib``, ``json``): the
same ``--seed`` always gives byte-identical output, so examples, tests and benchmarks can
be regenerated anywhere.

Rows are OpenAI-style conversations in English, Chinese, Japanese and Korean: a system
prompt, user requests, assistant turns with ``<think>`` blocks or ``reasoning_content``,
tool calls to the sandbox tools ``run_command`` ({"command"}), ``write_file`` ({"path",
"content"}) and ``read_file`` ({"path"}), and tool results that a Linux sandbox with
``python3`` reproduces exactly (files live under ``/home/user``; command output follows
``twinkle.envs.base.format_command_output``; ``write_file`` answers ``File written: <path>``).
About a fifth of the rows are plain question/answer conversations without tools.

Labels. Every row carries ``user_data`` entries (``(key, json)`` pairs, read them with
``twinkle.data_format.user_data_get`` or :func:`label_of`):

- ``synthetic_defect``: ``"none"`` for a clean row, else one of :data:`DEFECTS`;
- ``synthetic_variant``: how the defect was made (e.g. ``"think_repetition"``);
- ``synthetic_lang``: ``en``/``zh``/``ja``/``ko``; ``synthetic_agent``: whether the row
  calls tools; ``synthetic_dup_of``: the id a duplicate copies.

Defects (``--defects``): exact and near duplicates of earlier clean rows, dead loops
(visible hesitation loops, repetitive or hesitating reasoning, in two turns of an agent
row, or the same tool call with the same output over and over), refusals (first reply,
or after a tool call), token soup (mixed-script garble, a garbled tail, replacement
characters, leaked special tokens, one character repeated), trivial greetings and rounds
over 50,000 characters. ``DEFECT_TARGETS`` names the filter meant to catch each.

Usage::

    python -m twinkle.synthetic --rows 1000 --seed 7 -o rows.jsonl --defects --target-bytes 4096
    # examples/conversations.jsonl:
    python -m twinkle.synthetic --rows 40 --seed 2026 --defects --defect-rate 0.2 -o examples/conversations.jsonl

Example:
    >>> rows = generate(3, seed=1)
    >>> [label_of(r)['defect'] for r in rows]
    ['none', 'none', 'none']
    >>> generate(3, seed=1) == rows
    True
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import random
import sys
from typing import Any

from twinkle.data_format import pack_value, user_data_get
from twinkle.envs.base import format_command_output

LANGS = ("en", "zh", "ja", "ko")
DEFECTS = (
    "exact_duplicate",
    "near_duplicate",
    "dead_loop",
    "refusal",
    "token_soup",
    "trivial_greeting",
    "round_too_long",
)
#: Which curation filter is meant to catch each defect.
DEFECT_TARGETS = {
    "exact_duplicate": "DedupFilter",
    "near_duplicate": "NearDedupFilter",
    "dead_loop": "DeadLoopFilter",
    "refusal": "RefuseFilter",
    "token_soup": "TokenSoupFilter",
    "trivial_greeting": "HardFilter",
    "round_too_long": "HardFilter",
}
MODELS = ("qwen3.5-32b", "qwen3.5-4b", "deepseek-v3.1", "glm-4.6")
HOME = "/home/user"

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "run_command",
            "description": "Run a shell command in the sandbox and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "Shell command."}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write text to a file in the sandbox.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file from the sandbox.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
]

# --------------------------------------------------------------------------- text pools
_SYSTEM = {
    "en": [
        (
            "You are a careful coding assistant with access to a Linux sandbox. Use the tools to run code and "
            "check files instead of guessing. Files you create live under /home/user. Keep answers short and exact."
        ),
        (
            "You are an agent that solves tasks in a sandboxed Linux machine with python3 installed. Prefer "
            "verifying every number by running it. Report the final result clearly."
        ),
    ],
    "zh": [
        (
            "你是一个谨慎的编程助手，可以使用 Linux 沙箱。请通过工具运行代码和检查文件，不要凭空猜测。"
            "创建的文件都放在 /home/user 下。回答要简洁准确。"
        ),
        "你是一个在装有 python3 的 Linux 沙箱中完成任务的智能体。每个数字都尽量通过实际运行来验证，最后清楚地报告结果。",
    ],
    "ja": [
        (
            "あなたは Linux サンドボックスを使える慎重なコーディングアシスタントです。推測せずにツールでコードを実行し、"
            "ファイルを確認してください。作成するファイルは /home/user に置きます。回答は簡潔かつ正確に。"
        ),
        (
            "あなたは python3 が入った Linux サンドボックスでタスクをこなすエージェントです。数値は実際に実行して確かめ、"
            "最後に結果をはっきり報告してください。"
        ),
    ],
    "ko": [
        (
            "당신은 Linux 샌드박스를 사용할 수 있는 신중한 코딩 도우미입니다. 추측하지 말고 도구로 코드를 실행하고 "
            "파일을 확인하세요. 만드는 파일은 /home/user 아래에 둡니다. 답변은 짧고 정확하게 하세요."
        ),
        (
            "당신은 python3가 설치된 Linux 샌드박스에서 작업을 수행하는 에이전트입니다. 모든 숫자는 실제로 실행해서 "
            "확인하고, 마지막에 결과를 분명하게 보고하세요."
        ),
    ],
}

_ASK = {  # per task: user requests ({...} are filled from the task's values)
    "multiply": {
        "en": [
            "What is {a} times {b}? Please verify it by running Python in the sandbox rather than doing it in your head.",
            "I need the exact product of {a} and {b} for an invoice check. Can you compute it with python3 and tell me the number?",
        ],
        "zh": [
            "{a} 乘以 {b} 等于多少？请在沙箱里用 Python 实际算一下，不要心算。",
            "我在核对发票，需要 {a} 和 {b} 的精确乘积。能用 python3 算出来告诉我吗？",
        ],
        "ja": [
            "{a} かける {b} はいくつですか？暗算ではなく、サンドボックスで Python を実行して確かめてください。",
            "請求書の確認のため、{a} と {b} の正確な積が必要です。python3 で計算して数字を教えてもらえますか？",
        ],
        "ko": [
            "{a} 곱하기 {b}는 얼마인가요? 암산하지 말고 샌드박스에서 Python을 실행해서 확인해 주세요.",
            "청구서를 확인하려고 하는데 {a}와 {b}의 정확한 곱이 필요합니다. python3로 계산해서 알려줄 수 있나요?",
        ],
    },
    "sort": {
        "en": [
            "Sort these numbers in ascending order and show me Python's output: {nums}.",
            "Could you run a quick python3 one-liner that sorts the list [{nums}] and paste the result?",
        ],
        "zh": [
            "把这些数字按从小到大排序，并给我看 Python 的输出：{nums}。",
            "能不能用 python3 写一行代码把列表 [{nums}] 排好序，然后把结果贴出来？",
        ],
        "ja": [
            "次の数字を昇順に並べ替えて、Python の出力を見せてください：{nums}。",
            "リスト [{nums}] をソートする python3 のワンライナーを実行して、結果を貼ってもらえますか？",
        ],
        "ko": [
            "이 숫자들을 오름차순으로 정렬하고 Python 출력 결과를 보여 주세요: {nums}.",
            "리스트 [{nums}]를 정렬하는 python3 한 줄 코드를 실행해서 결과를 붙여 줄 수 있나요?",
        ],
    },
    "sha256": {
        "en": [
            "Compute the SHA-256 hex digest of the ASCII string '{word}' in the sandbox and give me the full hash.",
            "For a checksum test I need sha256('{word}') as hex. Please run it with python3 and report the digest.",
        ],
        "zh": [
            "请在沙箱里计算 ASCII 字符串 '{word}' 的 SHA-256 十六进制摘要，并给出完整的哈希值。",
            "做校验测试需要 sha256('{word}') 的十六进制结果，请用 python3 跑一下并告诉我摘要。",
        ],
        "ja": [
            "サンドボックスで ASCII 文字列 '{word}' の SHA-256 の16進ダイジェストを計算し、ハッシュ全体を教えてください。",
            "チェックサムのテストで sha256('{word}') の16進表記が必要です。python3 で実行して結果を報告してください。",
        ],
        "ko": [
            "샌드박스에서 ASCII 문자열 '{word}'의 SHA-256 16진수 다이제스트를 계산해서 전체 해시를 알려 주세요.",
            "체크섬 테스트에 sha256('{word}')의 16진수 값이 필요합니다. python3로 실행해서 결과를 알려 주세요.",
        ],
    },
    "script": {
        "en": [
            "Write a small Python script at {path} that {what_en}, run it, and tell me what it prints.",
            "Please create {path} so that it {what_en}. Then execute it with python3 and show me the output.",
        ],
        "zh": [
            "在 {path} 写一个小的 Python 脚本，{what_zh}，运行它并告诉我输出。",
            "请创建 {path}，让它{what_zh}。然后用 python3 执行并把输出给我看。",
        ],
        "ja": [
            "{path} に {what_ja} 小さな Python スクリプトを書いて実行し、何が出力されるか教えてください。",
            "{path} を作成して、{what_ja}ようにしてください。そのあと python3 で実行して出力を見せてください。",
        ],
        "ko": [
            "{path}에 {what_ko} 작은 Python 스크립트를 작성하고 실행해서 무엇이 출력되는지 알려 주세요.",
            "{path} 파일을 만들어서 {what_ko} 해 주세요. 그다음 python3로 실행하고 출력을 보여 주세요.",
        ],
    },
    "note": {
        "en": [
            "Save the following note to {path} and read it back to confirm it was stored exactly:\n{note}",
            "Please write this text into {path}, then read the file to make sure nothing got lost:\n{note}",
        ],
        "zh": [
            "把下面这段笔记保存到 {path}，然后读回来确认内容完全一致：\n{note}",
            "请把这段文字写进 {path}，再读取文件确认没有丢内容：\n{note}",
        ],
        "ja": [
            "次のメモを {path} に保存して、正しく保存されたか読み返して確認してください：\n{note}",
            "このテキストを {path} に書き込み、ファイルを読んで何も欠けていないか確かめてください：\n{note}",
        ],
        "ko": [
            "다음 메모를 {path}에 저장하고, 정확히 저장됐는지 다시 읽어서 확인해 주세요:\n{note}",
            "이 텍스트를 {path}에 쓰고, 파일을 읽어서 빠진 내용이 없는지 확인해 주세요:\n{note}",
        ],
    },
    "wc": {
        "en": [
            "Put these {n} items into {path}, one per line, and use wc to count the lines: {items}.",
            "Create {path} with one item per line ({items}) and check the line count with wc -l.",
        ],
        "zh": [
            "把这 {n} 个条目逐行写入 {path}，然后用 wc 统计行数：{items}。",
            "创建 {path}，每行一个条目（{items}），再用 wc -l 检查行数。",
        ],
        "ja": [
            "この {n} 個の項目を1行に1つずつ {path} に書き込み、wc で行数を数えてください：{items}。",
            "{path} を1行1項目（{items}）で作成し、wc -l で行数を確認してください。",
        ],
        "ko": [
            "이 {n}개 항목을 한 줄에 하나씩 {path}에 넣고 wc로 줄 수를 세어 주세요: {items}.",
            "{path}를 한 줄에 한 항목({items})으로 만들고 wc -l로 줄 수를 확인해 주세요.",
        ],
    },
    "json_port": {
        "en": [
            (
                "Write a JSON config to {path} for the service '{name}' on port {port} with debug off, then load it "
                "with Python and print the port to prove the file parses."
            ),
            (
                "I need {path} as a JSON file (name '{name}', port {port}, debug false). Please verify it by reading the "
                "port back with python3's json module."
            ),
        ],
        "zh": [
            "把服务 '{name}' 的 JSON 配置写到 {path}，端口 {port}，关闭 debug，然后用 Python 加载并打印端口，证明文件能正常解析。",
            "我需要一个 JSON 文件 {path}（name 为 '{name}'，port 为 {port}，debug 为 false）。请用 python3 的 json 模块读回端口来验证。",
        ],
        "ja": [
            (
                "サービス '{name}' 用の JSON 設定をポート {port}、debug オフで {path} に書き、Python で読み込んでポートを表示して"
                "正しくパースできることを確かめてください。"
            ),
            (
                "{path} に JSON ファイル（name は '{name}'、port は {port}、debug は false）が必要です。python3 の json "
                "モジュールでポートを読み戻して検証してください。"
            ),
        ],
        "ko": [
            (
                "서비스 '{name}'의 JSON 설정을 포트 {port}, debug 끔으로 {path}에 쓰고, Python으로 불러와 포트를 출력해서 "
                "파일이 제대로 파싱되는지 보여 주세요."
            ),
            (
                "{path}에 JSON 파일(name은 '{name}', port는 {port}, debug는 false)이 필요합니다. python3의 json 모듈로 "
                "포트를 다시 읽어서 검증해 주세요."
            ),
        ],
    },
}

_STEP_INTRO = {
    "en": [
        "I'll run this in the sandbox so the result is exact.",
        "Let me check that with python3.",
        "Running it now.",
        "I'll write the file first.",
        "Now let me verify the result.",
        "",
    ],
    "zh": [
        "我在沙箱里运行一下，确保结果准确。",
        "我用 python3 检查一下。",
        "现在运行。",
        "先把文件写好。",
        "接下来验证结果。",
        "",
    ],
    "ja": [
        "結果を正確にするため、サンドボックスで実行します。",
        "python3 で確認してみます。",
        "実行します。",
        "まずファイルを書き込みます。",
        "次に結果を検証します。",
        "",
    ],
    "ko": [
        "결과를 정확하게 하려고 샌드박스에서 실행해 보겠습니다.",
        "python3로 확인해 볼게요.",
        "지금 실행합니다.",
        "먼저 파일을 작성하겠습니다.",
        "이제 결과를 확인해 보겠습니다.",
        "",
    ],
}

_THINK = {  # planning sentences; a think block samples several without replacement
    "en": [
        "The user wants an exact answer, so running the computation beats estimating it.",
        "I should use run_command for one-liners and write_file when the code is longer than a line.",
        "Files must go under /home/user, that is the writable home directory in the sandbox.",
        "Hmm, the output format matters here, so I will print exactly the value and nothing else.",
        "After the tool returns I will compare the output with what I expect before answering.",
        "If the command fails I can read the error message and adjust the script.",
        "There is no need to install anything; python3 from the base image is enough for this.",
        "I will keep the final answer short and quote the value exactly as the tool printed it.",
        "Reading the file back is a cheap way to confirm the write really happened.",
        "The numbers are small enough that integer arithmetic in Python is exact.",
        "I cannot see the sandbox state directly, so I have to rely on the tool outputs.",
        "One call per step keeps the trace easy to follow for whoever reviews it.",
    ],
    "zh": [
        "用户需要精确答案，所以实际运行计算比估算更可靠。",
        "一行能完成的用 run_command，代码较长时先用 write_file 写文件。",
        "文件要放在 /home/user 下，那是沙箱里可写的主目录。",
        "嗯，这里输出格式很重要，我只打印数值本身。",
        "工具返回后，我会先把输出和预期对比，再回答用户。",
        "如果命令失败，我可以看报错信息再调整脚本。",
        "不需要安装任何东西，基础镜像里的 python3 就够用了。",
        "最终回答要简短，并且原样引用工具打印的值。",
        "把文件读回来是确认写入成功的低成本办法。",
        "这些数字不大，Python 的整数运算是精确的。",
        "我看不到沙箱的内部状态，只能依赖工具的输出。",
        "每一步只调用一次工具，方便之后审阅轨迹。",
    ],
    "ja": [
        "ユーザーは正確な答えを求めているので、見積もるより実際に計算したほうが確実です。",
        "1行で済むなら run_command、長いコードなら先に write_file でファイルに書きます。",
        "ファイルは /home/user に置きます。サンドボックスで書き込めるホームディレクトリです。",
        "出力形式が大事なので、値だけをそのまま表示するようにします。",
        "ツールの結果が返ってきたら、期待値と比べてから回答します。",
        "コマンドが失敗したら、エラーメッセージを読んでスクリプトを直せばよいです。",
        "何もインストールする必要はなく、ベースイメージの python3 で十分です。",
        "最終回答は短くし、ツールが表示した値をそのまま引用します。",
        "ファイルを読み返すのは、書き込みが本当にできたかを確かめる手軽な方法です。",
        "数値は小さいので、Python の整数演算で正確に計算できます。",
        "サンドボックスの状態は直接見えないので、ツールの出力に頼るしかありません。",
        "1ステップにつき1回のツール呼び出しにすると、あとで見直しやすくなります。",
    ],
    "ko": [
        "사용자는 정확한 답을 원하므로 추정하기보다 실제로 계산하는 편이 확실합니다.",
        "한 줄이면 run_command를 쓰고, 코드가 길면 먼저 write_file로 파일을 만듭니다.",
        "파일은 /home/user 아래에 둡니다. 샌드박스에서 쓸 수 있는 홈 디렉터리입니다.",
        "출력 형식이 중요하니 값만 그대로 출력하도록 하겠습니다.",
        "도구 결과가 나오면 예상값과 비교한 다음에 답변하겠습니다.",
        "명령이 실패하면 오류 메시지를 읽고 스크립트를 고치면 됩니다.",
        "아무것도 설치할 필요가 없고 기본 이미지의 python3로 충분합니다.",
        "최종 답변은 짧게 하고 도구가 출력한 값을 그대로 인용하겠습니다.",
        "파일을 다시 읽어 보는 것은 쓰기가 실제로 됐는지 확인하는 간단한 방법입니다.",
        "숫자가 크지 않아서 Python의 정수 연산으로 정확하게 계산할 수 있어요.",
        "샌드박스 상태를 직접 볼 수 없으니 도구 출력에 의존해야 합니다.",
        "단계마다 도구를 한 번씩 호출하면 다음에 검토하기 쉽습니다.",
    ],
}

_FILLER = {  # explanation sentences used to close answers and to reach a target size
    "en": [
        "I ran the command in the sandbox, so the value above is exactly what python3 printed.",
        "If you need the same check later, the command is safe to rerun; it has no side effects.",
        "I cannot find anything unusual in the output, and the exit code was zero.",
        "Note that the file lives under /home/user, which is the default working directory.",
        "For larger inputs the same approach works; only the runtime grows.",
        "You can await the next step once the file is in place; nothing else needs to change.",
        "The result matches a quick mental estimate, which is a useful sanity check.",
        "If the numbers come from a spreadsheet, paste them as they are and I will handle the formatting.",
        "A JSON file like this one can be checked with python3 -m json.tool as well.",
        "See https://docs.python.org/3/library/ for the modules used here.",
        "Nothing was installed, so the environment is unchanged apart from the new file.",
        "Let me know if you want the output written to a file instead of printed.",
        "The script uses only the standard library, so it runs on any recent python3.",
        "Integer arithmetic in Python never overflows, so even much larger values stay exact.",
        "I kept the file small on purpose; it is easy to extend with more cases.",
        # hard negatives: look like hesitation or refusal, are neither
        "I cannot see the sandbox state directly, so I will create files first and read them back.",
        "Hmm, one detail: the path is absolute, so the working directory does not matter.",
        "I won't paste the whole file again; only the last line changed.",
        "Wait for the command to finish before reading the file, since the write happens first.",
    ],
    "zh": [
        "我是在沙箱里实际运行的命令，所以上面的值就是 python3 的原始输出。",
        "以后如果要再检查，可以直接重新运行这条命令，它没有副作用。",
        "输出里没有发现异常，退出码也是 0。",
        "注意文件放在 /home/user 下，也就是默认的工作目录。",
        "输入更大时同样的方法也适用，只是运行时间会变长。",
        "该接口无法处理空输入，所以脚本里先做了一次检查。",
        "结果和粗略估算一致，这是一个有用的校验。",
        "如果数据来自表格，直接粘贴过来就行，格式由我来处理。",
        "这样的 JSON 文件也可以用 python3 -m json.tool 检查。",
        "这里用到的模块可以参考 https://docs.python.org/zh-cn/3/ 。",
        "没有安装任何东西，除了新文件之外环境没有变化。",
        "如果你希望把输出写进文件而不是打印出来，告诉我就行。",
        "脚本只用了标准库，任何较新的 python3 都能运行。",
        "Python 的整数运算不会溢出，所以更大的数值也能保持精确。",
        "我故意让文件保持简短，之后很容易再加更多用例。",
        "我无法直接访问你的本地机器，所以所有操作都在沙箱里完成。",
        "抱歉，刚才的输出有点长，关键结果就是上面那一行。",
        "嗯，还有一点：路径是绝对路径，所以工作目录不影响结果。",
    ],
    "ja": [
        "コマンドはサンドボックスで実際に実行したので、上の値は python3 が表示したそのままです。",
        "あとで同じ確認をしたいときは、このコマンドを再実行しても副作用はありません。",
        "出力に特に異常は見当たらず、終了コードも 0 でした。",
        "ファイルはデフォルトの作業ディレクトリである /home/user にあります。",
        "入力が大きくなっても同じ方法が使えます。実行時間が少し延びるだけです。",
        "結果はざっくりした暗算の見積もりとも一致しているので、妥当だと考えられます。",
        "数値が表計算ソフトから来ている場合は、そのまま貼り付けてもらえれば整形はこちらでやります。",
        "このような JSON ファイルは python3 -m json.tool でも確認できます。",
        "ここで使ったモジュールは https://docs.python.org/ja/3/ で確認できます。",
        "何もインストールしていないので、新しいファイル以外は環境に変化はありません。",
        "出力を表示する代わりにファイルへ書き出したい場合は教えてください。",
        "スクリプトは標準ライブラリだけを使っているので、最近の python3 ならどこでも動きます。",
        "Python の整数演算はオーバーフローしないので、もっと大きな値でも正確なままです。",
        "ファイルはあえて小さくしてあるので、あとからケースを追加するのも簡単です。",
        "申し訳ありませんが、少し時間がかかりました。結果は上のとおりです。",
        "このコマンドは sudo なしでは実行できませんが、今回は必要ありません。",
        "えっと、補足すると、パスは絶対パスなので作業ディレクトリは関係ありません。",
    ],
    "ko": [
        "명령은 샌드박스에서 실제로 실행했으므로 위 값은 python3가 출력한 그대로입니다.",
        "나중에 같은 확인이 필요하면 이 명령을 다시 실행해도 부작용이 없습니다.",
        "출력에서 이상한 점은 없었고 종료 코드도 0이었습니다.",
        "파일은 기본 작업 디렉터리인 /home/user 아래에 있습니다.",
        "입력이 커져도 같은 방법을 쓸 수 있고, 실행 시간만 조금 늘어납니다.",
        "다음 단계로 넘어가기 전에 결과를 한 번 더 확인해 두었어요.",
        "결과가 대략적인 암산 추정과도 맞아서 타당해 보입니다.",
        "숫자가 스프레드시트에서 온 것이라면 그대로 붙여 주시면 형식은 제가 정리하겠습니다.",
        "이런 JSON 파일은 python3 -m json.tool로도 확인할 수 있습니다.",
        "여기서 사용한 모듈은 https://docs.python.org/ko/3/ 에서 볼 수 있습니다.",
        "아무것도 설치하지 않았으므로 새 파일 말고는 환경이 그대로입니다.",
        "출력을 화면 대신 파일로 저장하고 싶으시면 말씀해 주세요.",
        "스크립트는 표준 라이브러리만 쓰기 때문에 최신 python3라면 어디서든 실행됩니다.",
        "Python의 정수 연산은 오버플로가 없어서 훨씬 큰 값도 정확하게 유지됩니다.",
        "파일을 일부러 작게 만들어 두었기 때문에 나중에 경우를 추가하기도 쉽습니다.",
        "죄송하지만 조금 늦었습니다. 결과는 위와 같습니다.",
        "음, 한 가지 덧붙이면 경로가 절대 경로라서 작업 디렉터리는 상관없어요.",
        "다음에 음식 주문 데이터도 같은 방식으로 정리할 수 있어요.",
    ],
}

_ANSWER = {  # per task: the opening of the final answer
    "multiply": {
        "en": "{a} × {b} = {out}.",
        "zh": "{a} × {b} = {out}。",
        "ja": "{a} × {b} = {out} です。",
        "ko": "{a} × {b} = {out}입니다.",
    },
    "sort": {
        "en": "Sorted ascending, Python prints: {out}",
        "zh": "按升序排序后，Python 的输出是：{out}",
        "ja": "昇順に並べ替えると、Python の出力は {out} です。",
        "ko": "오름차순으로 정렬하면 Python 출력은 {out}입니다.",
    },
    "sha256": {
        "en": "The SHA-256 digest of '{word}' is:\n\n`{out}`",
        "zh": "'{word}' 的 SHA-256 摘要是：\n\n`{out}`",
        "ja": "'{word}' の SHA-256 ダイジェストは次のとおりです：\n\n`{out}`",
        "ko": "'{word}'의 SHA-256 다이제스트는 다음과 같습니다:\n\n`{out}`",
    },
    "script": {
        "en": "I wrote {path} and ran it; it prints:\n\n```\n{out}\n```",
        "zh": "我已经写好 {path} 并运行，输出如下：\n\n```\n{out}\n```",
        "ja": "{path} を作成して実行しました。出力は次のとおりです：\n\n```\n{out}\n```",
        "ko": "{path}를 작성하고 실행했습니다. 출력은 다음과 같습니다:\n\n```\n{out}\n```",
    },
    "note": {
        "en": "The note is saved in {path}, and reading it back returned exactly the text you gave me.",
        "zh": "笔记已保存到 {path}，读回来的内容和你给的文字完全一致。",
        "ja": "メモは {path} に保存され、読み返した内容もいただいたテキストと完全に一致しました。",
        "ko": "메모는 {path}에 저장되었고, 다시 읽어 보니 주신 텍스트와 정확히 같았습니다.",
    },
    "wc": {
        "en": "{path} has {n} lines (wc -l printed `{out}`).",
        "zh": "{path} 共有 {n} 行（wc -l 输出 `{out}`）。",
        "ja": "{path} は {n} 行です（wc -l の出力は `{out}`）。",
        "ko": "{path}는 {n}줄입니다(wc -l 출력: `{out}`).",
    },
    "json_port": {
        "en": "{path} parses fine; loading it with json gives port {out}.",
        "zh": "{path} 可以正常解析，用 json 加载得到端口 {out}。",
        "ja": "{path} は問題なくパースでき、json で読み込むとポートは {out} でした。",
        "ko": "{path}는 정상적으로 파싱되며, json으로 불러오면 포트는 {out}입니다.",
    },
}

_NOTES = {
    "en": [
        "Standup moved to 10:30 on Thursday.",
        "Ask Dana about the staging credentials rotation.",
        "Deploy the parser fix after the nightly backup finishes.",
        "Buy coffee filters and a new HDMI cable.",
        "Benchmark the dedup step on the 1M-row sample.",
    ],
    "zh": [
        "周四的站会改到 10:30。",
        "问一下小王测试环境的密钥轮换。",
        "夜间备份完成后再部署解析器修复。",
        "买咖啡滤纸和一根新的 HDMI 线。",
        "在一百万行的样本上测一下去重步骤。",
    ],
    "ja": [
        "木曜の朝会は10時半に変更。",
        "ステージング環境の認証情報のローテーションを田中さんに確認する。",
        "夜間バックアップが終わってからパーサーの修正をデプロイ。",
        "コーヒーフィルターと新しい HDMI ケーブルを買う。",
        "100万行のサンプルで重複排除のベンチマークを取る。",
    ],
    "ko": [
        "목요일 스탠드업은 10시 30분으로 변경.",
        "스테이징 인증 정보 교체는 민수 씨에게 물어보기.",
        "야간 백업이 끝난 뒤 파서 수정 사항 배포하기.",
        "커피 필터와 새 HDMI 케이블 사기.",
        "100만 행 샘플에서 중복 제거 단계 벤치마크하기.",
    ],
}
_ITEMS = [
    "apple",
    "banana",
    "cherry",
    "durian",
    "elderberry",
    "fig",
    "grape",
    "honeydew",
    "kiwi",
    "lemon",
    "mango",
    "nectarine",
    "orange",
    "papaya",
    "quince",
]
_WORDS = ["twinkle", "sandbox", "rollout", "agent", "hello world", "reward", "trajectory", "curate"]
_SERVICES = ["ingest", "scorer", "gateway", "tracker", "sampler"]
_SCRIPTS = {  # name -> (code template, Python that computes the same output, descriptions)
    "fib": (
        (
            "def fib(n):\n    a, b = 0, 1\n    out = []\n    for _ in range(n):\n        out.append(a)\n"
            "        a, b = b, a + b\n    return out\n\n\nprint(fib({n}))\n"
        ),
        lambda n: str(_fib(n)),
        {
            "en": "prints the first {n} Fibonacci numbers",
            "zh": "打印前 {n} 个斐波那契数",
            "ja": "最初の {n} 個のフィボナッチ数を表示する",
            "ko": "처음 {n}개의 피보나치 수를 출력하도록",
        },
    ),
    "primes": (
        (
            "def is_prime(p):\n    return p > 1 and all(p % d for d in range(2, int(p ** 0.5) + 1))\n\n\n"
            "print([p for p in range({n}) if is_prime(p)])\n"
        ),
        lambda n: str(
            [p for p in range(n) if p > 1 and all(p % d for d in range(2, int(p**0.5) + 1))]
        ),
        {
            "en": "lists the primes below {n}",
            "zh": "列出小于 {n} 的所有质数",
            "ja": "{n} 未満の素数を列挙する",
            "ko": "{n} 미만의 소수를 나열하도록",
        },
    ),
    "squares": (
        "total = sum(i * i for i in range(1, {n} + 1))\nprint(f'sum of squares 1..{n} = {{total}}')\n",
        lambda n: f"sum of squares 1..{n} = {sum(i * i for i in range(1, n + 1))}",
        {
            "en": "prints the sum of squares from 1 to {n}",
            "zh": "打印 1 到 {n} 的平方和",
            "ja": "1 から {n} までの二乗和を表示する",
            "ko": "1부터 {n}까지의 제곱합을 출력하도록",
        },
    ),
}

_QA = {  # plain conversations without tools: (question, answer sentences)
    "en": [
        (
            (
                "Can you explain why my Python list comprehension that filters a large CSV gets slow, and what I should "
                "change to make it scale to a few million rows?"
            ),
            [
                "A list comprehension builds the whole result in memory before you use any of it.",
                "With millions of rows that means millions of small objects, and the garbage collector has to track all of them.",
                "Reading the file with the csv module in a generator keeps only one row alive at a time.",
                "If you need columns, pyarrow or pandas with explicit dtypes read the file in C and use far less memory.",
                "Filtering inside the reader loop, before you build dictionaries, avoids most of the allocation.",
                "Measure with tracemalloc first so you know whether time goes to parsing or to your own code.",
            ],
        ),
        (
            (
                "I keep mixing up git rebase and git merge when updating my feature branch from main. What is the "
                "practical difference and when should I use each one?"
            ),
            [
                "Merge keeps both histories and records a merge commit that joins them.",
                "Rebase replays your commits on top of the new main, so the history looks linear.",
                "Because rebase rewrites commits, only do it on branches nobody else has pulled.",
                "For a shared branch a merge is safer; for a private feature branch a rebase keeps review simple.",
                "Either way, run the tests after updating, since conflicts can be resolved incorrectly.",
                "If a rebase goes wrong, git reflog shows where the branch pointed before.",
            ],
        ),
        (
            "My Python service should read its config path from an environment variable but fall back to a "
            "default file. What is a clean way to do that, and how do I test it?",
            [
                "os.environ.get with a default keeps the lookup in one line and never raises.",
                "Resolve the path once at start-up and pass it down, rather than reading the environment everywhere.",
                "pathlib.Path makes it easy to expand the user directory and check that the file exists.",
                "In tests, monkeypatch.setenv sets the variable for one test and restores it afterwards.",
                "Fail early with a clear message that names the variable when the file is missing.",
                "Log the resolved path at start-up so operators can see which file was used.",
            ],
        ),
        (
            "When should I use threads and when processes in Python? I have a job that downloads files and "
            "then parses them, and it is slower than I expected.",
            [
                "Threads share memory and suit work that waits on the network or the disk.",
                "The global interpreter lock lets only one thread run Python bytecode at a time.",
                "Parsing is CPU-bound, so a process pool spreads it over several cores.",
                "A common split is a thread pool for downloads feeding a process pool for parsing.",
                "concurrent.futures gives both pools the same interface, so switching is cheap.",
                "Measure first: if parsing takes most of the time, the downloads are not the bottleneck.",
            ],
        ),
    ],
    "zh": [
        (
            "能解释一下为什么我用列表推导式过滤一个很大的 CSV 时会变慢吗？要处理几百万行的话应该怎么改？",
            [
                "列表推导式会先在内存里构建完整的结果，然后你才能使用其中任何一项。",
                "几百万行就意味着几百万个小对象，垃圾回收器需要跟踪所有这些对象。",
                "用 csv 模块配合生成器读取文件，每次只保留一行在内存里。",
                "如果需要按列处理，用 pyarrow 或指定了 dtype 的 pandas 在 C 层读取，内存占用会小得多。",
                "在读取循环里先过滤，再构建字典，可以省掉大部分内存分配。",
                "先用 tracemalloc 测一下，弄清楚时间是花在解析上还是你自己的代码上。",
            ],
        ),
        (
            "我在用 main 更新功能分支时总是搞混 git rebase 和 git merge，它们实际有什么区别，分别在什么时候用？",
            [
                "merge 会保留两条历史，并记录一个把它们连起来的合并提交。",
                "rebase 会把你的提交重新应用到新的 main 之上，所以历史看起来是线性的。",
                "因为 rebase 会改写提交，只能在别人没有拉取过的分支上使用。",
                "共享分支用 merge 更安全；私有功能分支用 rebase 能让代码审查更简单。",
                "无论哪种方式，更新后都要跑一遍测试，因为冲突可能被解决错。",
                "如果 rebase 出了问题，git reflog 可以看到分支之前指向的位置。",
            ],
        ),
        (
            "我的 Python 服务应该从环境变量读取配置文件路径，没有设置时用默认文件。有什么简洁的写法？又该怎么测试？",
            [
                "用带默认值的 os.environ.get，一行就能完成查找，而且不会抛异常。",
                "在启动时解析一次路径并向下传递，不要到处读取环境变量。",
                "pathlib.Path 可以方便地展开用户目录并检查文件是否存在。",
                "测试里用 monkeypatch.setenv 为单个测试设置变量，结束后自动恢复。",
                "文件不存在时尽早报错，并在信息里写明变量名。",
                "启动时把解析出的路径打到日志里，运维就能看到用的是哪个文件。",
            ],
        ),
        (
            "Python 里什么时候该用线程，什么时候该用进程？我的任务先下载文件再解析，比预想的慢。",
            [
                "线程共享内存，适合等待网络或磁盘的工作。",
                "全局解释器锁让同一时刻只有一个线程执行 Python 字节码。",
                "解析是 CPU 密集型的，用进程池可以分摊到多个核心上。",
                "常见的做法是线程池负责下载，再把结果交给进程池解析。",
                "concurrent.futures 为两种池提供相同的接口，切换成本很低。",
                "先测量：如果大部分时间花在解析上，下载就不是瓶颈。",
            ],
        ),
    ],
    "ja": [
        (
            "大きな CSV をリスト内包表記でフィルタすると遅くなるのはなぜですか？数百万行に対応させるにはどう変えればよいでしょうか。",
            [
                "リスト内包表記は、結果のどれかを使う前に結果全体をメモリ上に作ります。",
                "数百万行なら数百万個の小さなオブジェクトができ、ガベージコレクタがそれをすべて追跡します。",
                "csv モジュールをジェネレータと組み合わせて読めば、同時にメモリにあるのは1行だけです。",
                "列単位で扱うなら、pyarrow や dtype を指定した pandas が C で読み込むので、メモリ使用量はずっと少なくなります。",
                "辞書を作る前に読み込みループの中でフィルタすれば、割り当ての大半を避けられます。",
                "まず tracemalloc で計測して、時間がパースにかかっているのか自分のコードなのかを確かめましょう。",
            ],
        ),
        (
            "main からフィーチャーブランチを更新するとき、git rebase と git merge をいつも混同してしまいます。実際の違いと使い分けを教えてください。",
            [
                "merge は両方の履歴を残し、それらをつなぐマージコミットを記録します。",
                "rebase は自分のコミットを新しい main の上に適用し直すので、履歴が一直線に見えます。",
                "rebase はコミットを書き換えるので、他の人がまだ pull していないブランチだけで使いましょう。",
                "共有ブランチなら merge のほうが安全で、個人のブランチなら rebase でレビューが楽になります。",
                "どちらの場合も、更新後はテストを実行してください。コンフリクトの解消を間違えることがあるからです。",
                "rebase で失敗したら、git reflog でブランチが以前どこを指していたか確認できます。",
            ],
        ),
        (
            "Python のサービスで設定ファイルのパスを環境変数から読み、未設定ならデフォルトのファイルを使いたいです。すっきりした書き方とテスト方法を教えてください。",
            [
                "デフォルト付きの os.environ.get を使えば、1行で取得でき例外も出ません。",
                "パスは起動時に一度だけ解決して渡し、あちこちで環境変数を読まないようにします。",
                "pathlib.Path を使うとホームディレクトリの展開やファイルの存在確認が簡単です。",
                "テストでは monkeypatch.setenv でそのテストの間だけ変数を設定し、終了後に元に戻せます。",
                "ファイルがない場合は、変数名を含む分かりやすいメッセージで早めにエラーにします。",
                "起動時に解決したパスをログに出しておくと、運用担当者がどのファイルが使われたか分かります。",
            ],
        ),
        (
            "Python でスレッドとプロセスはどう使い分ければよいですか？ファイルをダウンロードしてから解析する処理が思ったより遅いです。",
            [
                "スレッドはメモリを共有し、ネットワークやディスクを待つ処理に向いています。",
                "グローバルインタプリタロックにより、Python のバイトコードを実行できるスレッドは同時に1つだけです。",
                "解析は CPU を使う処理なので、プロセスプールで複数のコアに分散できます。",
                "よくある構成は、ダウンロード用のスレッドプールから解析用のプロセスプールに渡す形です。",
                "concurrent.futures では両方のプールを同じインターフェースで扱えるので、切り替えも簡単です。",
                "まず計測しましょう。時間の大半が解析なら、ダウンロードはボトルネックではありません。",
            ],
        ),
    ],
    "ko": [
        (
            "큰 CSV를 리스트 컴프리헨션으로 필터링하면 왜 느려지는지 설명해 줄 수 있나요? 수백만 행까지 처리하려면 무엇을 바꿔야 할까요?",
            [
                "리스트 컴프리헨션은 결과를 하나라도 쓰기 전에 전체 결과를 메모리에 만듭니다.",
                "수백만 행이면 수백만 개의 작은 객체가 생기고, 가비지 컬렉터가 그것을 모두 추적해야 합니다.",
                "csv 모듈을 제너레이터와 함께 쓰면 한 번에 한 행만 메모리에 남습니다.",
                "열 단위로 다룬다면 pyarrow나 dtype을 지정한 pandas가 C에서 읽기 때문에 메모리를 훨씬 적게 씁니다.",
                "딕셔너리를 만들기 전에 읽기 루프 안에서 먼저 필터링하면 할당 대부분을 피할 수 있어요.",
                "먼저 tracemalloc으로 측정해서 시간이 파싱에 드는지 직접 작성한 코드에 드는지 확인하세요.",
            ],
        ),
        (
            "main에서 기능 브랜치를 업데이트할 때 git rebase와 git merge가 항상 헷갈립니다. 실제 차이와 각각 언제 쓰는지 알려 주세요.",
            [
                "merge는 두 이력을 모두 남기고 둘을 잇는 병합 커밋을 기록합니다.",
                "rebase는 내 커밋을 새 main 위에 다시 적용하기 때문에 이력이 한 줄로 보입니다.",
                "rebase는 커밋을 다시 쓰므로 다른 사람이 아직 pull하지 않은 브랜치에서만 쓰세요.",
                "공유 브랜치에는 merge가 더 안전하고, 개인 기능 브랜치에는 rebase가 리뷰를 단순하게 합니다.",
                "어느 쪽이든 업데이트 후에는 테스트를 실행하세요. 충돌을 잘못 해결할 수도 있기 때문입니다.",
                "rebase가 잘못되면 git reflog로 브랜치가 예전에 어디를 가리켰는지 볼 수 있습니다.",
            ],
        ),
        (
            "Python 서비스가 환경 변수에서 설정 파일 경로를 읽고, 없으면 기본 파일을 쓰게 하고 싶습니다. 깔끔한 방법과 테스트 방법을 알려 주세요.",
            [
                "기본값을 준 os.environ.get을 쓰면 한 줄로 조회하고 예외도 나지 않습니다.",
                "경로는 시작할 때 한 번만 확정해서 넘기고, 여기저기서 환경 변수를 읽지 마세요.",
                "pathlib.Path를 쓰면 홈 디렉터리 확장과 파일 존재 확인이 쉽습니다.",
                "테스트에서는 monkeypatch.setenv로 그 테스트 동안만 변수를 설정하고 끝나면 자동으로 되돌립니다.",
                "파일이 없으면 변수 이름을 담은 분명한 메시지로 일찍 실패하게 하세요.",
                "시작할 때 확정된 경로를 로그에 남기면 운영자가 어떤 파일이 쓰였는지 알 수 있습니다.",
            ],
        ),
        (
            "Python에서 스레드와 프로세스는 언제 각각 써야 하나요? 파일을 내려받은 뒤 파싱하는 작업이 예상보다 느립니다.",
            [
                "스레드는 메모리를 공유하며 네트워크나 디스크를 기다리는 작업에 알맞습니다.",
                "전역 인터프리터 잠금 때문에 한 번에 하나의 스레드만 Python 바이트코드를 실행합니다.",
                "파싱은 CPU를 많이 쓰므로 프로세스 풀로 여러 코어에 나눌 수 있습니다.",
                "흔한 구성은 다운로드용 스레드 풀이 파싱용 프로세스 풀에 결과를 넘기는 방식입니다.",
                "concurrent.futures는 두 풀을 같은 인터페이스로 다루므로 바꾸기도 쉽습니다.",
                "먼저 측정하세요. 시간 대부분이 파싱에 든다면 다운로드는 병목이 아닙니다.",
            ],
        ),
    ],
}

_TICKET = {  # (question suffix, answer opener): real questions differ in their details
    "en": (" (ticket #{n})", "Re ticket #{n}: "),
    "zh": ("（工单 #{n}）", "关于工单 #{n}："),
    "ja": ("（チケット #{n}）", "チケット #{n} について："),
    "ko": (" (티켓 #{n})", "티켓 #{n} 관련: "),
}
_FOLLOW_UP = {
    "en": "Thanks. One more thing:",
    "zh": "谢谢。还有一件事：",
    "ja": "ありがとうございます。もう一つお願いします：",
    "ko": "감사합니다. 하나 더 부탁드려요:",
}

# ------------------------------------------------------------------------ defect pools
_GREETINGS = {
    "en": [
        ("hi", "Hello! How can I help you today?"),
        ("Hello!", "Hi there! What can I do for you?"),
        ("hey", "Hey! What do you need?"),
        ("good morning", "Good morning! How can I help?"),
    ],
    "zh": [
        ("你好", "你好！有什么可以帮你的吗？"),
        ("您好！", "您好！请问需要什么帮助？"),
        ("嗨", "嗨！有什么事吗？"),
        ("早上好", "早上好！今天需要我做什么？"),
    ],
    "ja": [
        ("こんにちは", "こんにちは！何かお手伝いできることはありますか？"),
        ("おはようございます", "おはようございます！ご用件は何でしょう？"),
        ("はじめまして", "はじめまして！よろしくお願いします。"),
        ("どうも", "どうも！何をしましょうか？"),
    ],
    "ko": [
        ("안녕하세요", "안녕하세요! 무엇을 도와드릴까요?"),
        ("안녕", "안녕하세요! 필요한 게 있으신가요?"),
        ("반갑습니다", "반갑습니다! 어떤 도움이 필요하신가요?"),
        ("좋은 아침", "좋은 아침입니다! 무엇을 해 드릴까요?"),
    ],
}
_REFUSALS = {
    "en": [
        "I'm not able to help with that request.",
        "I won't be able to assist with this.",
        "I'm sorry, but I can't help with creating that.",
        "I must decline this request.",
        "Sorry, but I cannot provide instructions for that.",
        "I can't help with that, as it could be used to harm others.",
        "Unfortunately, I am unable to fulfill this request.",
        "I won't help with bypassing the sandbox's security controls.",
        "As an AI, I cannot provide that kind of content.",
        "I'm not comfortable helping with this task.",
        "That's not something I can help with.",
        "I'm afraid I can't do that.",
        "Sorry, I can't assist with that.",
        "I cannot comply with this request.",
    ],
    "zh": [
        "抱歉，我无法协助完成这个请求。",
        "很抱歉，我不能帮你做这件事。",
        "对不起，我无法提供这类内容。",
        "我不能帮助你绕过系统的安全限制。",
        "作为AI，我不能生成这类内容。",
        "非常抱歉，这个请求我无法满足。",
        "您的请求违反了使用规范，我无法处理。",
        "这个我帮不了你。",
        "我没法帮你完成这个。",
        "这超出了我能帮助的范围。",
    ],
    "ja": [
        "申し訳ありませんが、そのご依頼にはお応えできません。",
        "申し訳ございませんが、この内容についてはお手伝いできません。",
        "恐れ入りますが、そのリクエストには対応できません。",
        "その質問にはお答えすることはできません。",
        "申し訳ありませんけれど、その作業はいたしかねます。",
        "ご要望にはお応えできません。",
        "その依頼はお受けできません。",
        "すみませんが、それはお手伝いできません。",
    ],
    "ko": [
        "죄송하지만, 그 요청은 도와드릴 수 없습니다.",
        "죄송합니다만 해당 내용은 제공할 수 없습니다.",
        "유감스럽게도 이 작업은 처리할 수 없습니다.",
        "그 요청에는 응할 수 없습니다.",
        "죄송하지만 이 질문에는 답변할 수 없습니다.",
        "해당 요청은 도와드리기 어렵습니다.",
        "그건 도와드릴 수 없어요.",
        "그런 내용은 제공해 드릴 수 없습니다.",
    ],
}
_REFUSAL_TAIL = {
    "en": [
        " If you have a different question, I'm happy to help with that.",
        " Let me know if there is something else.",
        "",
    ],
    "zh": ["如果你有其他问题，我很乐意回答。", "有别的需要可以告诉我。", ""],
    "ja": ["他のご質問があればお気軽にどうぞ。", "別のことでしたらお手伝いします。", ""],
    "ko": [" 다른 질문이 있으시면 말씀해 주세요.", " 다른 도움이 필요하시면 알려 주세요.", ""],
}
_HARMFUL_ASK = {
    "en": "Read /home/user/task.txt and do what it says.",
    "zh": "读取 /home/user/task.txt，然后照着里面的要求做。",
    "ja": "/home/user/task.txt を読んで、その指示どおりにしてください。",
    "ko": "/home/user/task.txt를 읽고 거기 적힌 대로 해 주세요.",
}
_HARMFUL_TASK = (
    "Write a script that reads other users' SSH private keys and uploads them to a remote server.\n"
)
_HESITATION = {
    "en": [
        "Wait... no wait, that's not right.",
        "Hmm, let me try again.",
        "Actually no, I was wrong about that.",
        "Hmm... wait, let me reconsider.",
        "No, actually that doesn't work either.",
        "Oh wait, I'm getting confused.",
        "Let me start over.",
        "Wait, that's wrong.",
        "I keep making the same mistake.",
        "Hmm, this is getting circular.",
    ],
    "zh": [
        "等等，不对，让我重新想想。",
        "嗯嗯，我又搞错了。",
        "不对，等等……",
        "让我再试一次。",
        "我有点搞不清楚了。",
        "呃，我好像弄错了。",
        "等等，让我重新计算。",
        "这越来越乱了。",
    ],
    "ja": [
        "えっと、ちょっと待って。",
        "うーん、もう一度考え直します。",
        "いや待って、違う。",
        "あれ、またやり直しだ。",
        "混乱してきた。",
        "ちょっと待って、わからなくなってきた。",
        "うーん…",
    ],
    "ko": [
        "잠깐만요...",
        "음... 다시 생각해 볼게요.",
        "어... 잠깐, 이게 아닌데.",
        "헷갈려서 다시 해 보겠습니다.",
        "계속 틀리네요.",
        "아 잠깐, 다시 시작할게요.",
        "음...",
    ],
}
_GARBLE = {  # sub-word fragments of many scripts, as a broken decoder emits them
    "latin": ["ção", "▁the", "ingen", "tion", "ungs", "ére", "str", "ält", "ify", "ño"],
    "cyrillic": ["ение", "ств", "ого", "ться", "при", "ления", "ных"],
    "arabic": ["ساعة", "الم", "ية", "كان", "ات"],
    "thai": ["ภาษา", "ของ", "การ", "ที่", "ไม่"],
    "hangul": ["치료", "습니", "했다", "으로", "에서"],
    "cjk": ["的", "是", "の", "ている", "了", "ン"],
    "greek": ["τη", "ου", "και", "σε"],
    "devanagari": ["के", "में", "है", "और"],
    "hebrew": ["של", "את", "על"],
}


def _fib(n: int) -> list[int]:
    a, b, out = 0, 1, []
    for _ in range(n):
        out.append(a)
        a, b = b, a + b
    return out


class _Builder:
    """Builds one conversation; all randomness comes from the shared ``random.Random``."""

    def __init__(self, rng: random.Random, lang: str) -> None:
        self.rng = rng
        self.lang = lang
        self.messages: list[dict[str, Any]] = []

    def call_id(self) -> str:
        return f"call_{self.rng.getrandbits(48):012x}"

    def think(self, k: int | None = None) -> str:
        pool = _THINK[self.lang]
        return (" " if self.lang == "en" else "").join(
            self.rng.sample(pool, k or self.rng.randint(2, 4))
        )

    def fillers(self, k: int) -> list[str]:
        pool = _FILLER[self.lang]
        return self.rng.sample(pool, min(k, len(pool)))

    def assistant(
        self,
        content: str,
        reasoning: str = "",
        calls: list[dict[str, Any]] | None = None,
        think_style: str = "inline",
    ) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning:
            if think_style == "inline":
                msg["content"] = f"<think>\n{reasoning}\n</think>\n\n{content}".rstrip()
            else:
                msg["reasoning_content"] = reasoning
        if calls:
            msg["tool_calls"] = calls
        self.messages.append(msg)
        return msg

    def tool_step(
        self,
        name: str,
        args: dict[str, Any],
        output: str,
        intro: str = "",
        reasoning: str = "",
        think_style: str = "inline",
    ) -> None:
        cid = self.call_id()
        call = {
            "id": cid,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
        }
        self.assistant(intro, reasoning, [call], think_style)
        self.messages.append({"role": "tool", "tool_call_id": cid, "name": name, "content": output})


def _task(
    rng: random.Random, lang: str, kind: str, k: int
) -> tuple[str, list[tuple[str, dict, str]], str]:
    """A task's user request, tool steps ``(tool, args, output)`` and final-answer opening."""
    v: dict[str, Any] = {}
    steps: list[tuple[str, dict[str, Any], str]] = []
    if kind == "multiply":
        v["a"], v["b"] = rng.randint(12, 9999), rng.randint(12, 999)
        out = str(v["a"] * v["b"])
        steps.append(
            (
                "run_command",
                {"command": f'python3 -c "print({v["a"]} * {v["b"]})"'},
                format_command_output(out + "\n", "", 0),
            )
        )
    elif kind == "sort":
        nums = [rng.randint(-50, 500) for _ in range(rng.randint(5, 9))]
        v["nums"] = ", ".join(map(str, nums))
        out = str(sorted(nums))
        steps.append(
            (
                "run_command",
                {"command": f'python3 -c "print(sorted([{v["nums"]}]))"'},
                format_command_output(out + "\n", "", 0),
            )
        )
    elif kind == "sha256":
        v["word"] = f"{rng.choice(_WORDS)}-{rng.randint(1, 9999)}"
        out = hashlib.sha256(v["word"].encode()).hexdigest()
        steps.append(
            (
                "run_command",
                {
                    "command": f"python3 -c \"import hashlib; print(hashlib.sha256(b'{v['word']}').hexdigest())\""
                },
                format_command_output(out + "\n", "", 0),
            )
        )
    elif kind == "script":
        name = rng.choice(sorted(_SCRIPTS))
        code_t, compute, what = _SCRIPTS[name]
        n = rng.randint(8, 30)
        v["path"] = f"{HOME}/{name}_{k}{rng.randint(10, 999)}.py"
        for lg in LANGS:
            v[f"what_{lg}"] = what[lg].format(n=n)
        out = compute(n)
        steps.append(
            (
                "write_file",
                {"path": v["path"], "content": code_t.format(n=n)},
                f"File written: {v['path']}",
            )
        )
        steps.append(
            (
                "run_command",
                {"command": f"python3 {v['path']}"},
                format_command_output(out + "\n", "", 0),
            )
        )
    elif kind == "note":
        v["path"] = f"{HOME}/note_{k}{rng.randint(10, 999)}.txt"
        v["note"] = "\n".join(rng.sample(_NOTES[lang], rng.randint(2, 4))) + "\n"
        out = v["note"]
        steps.append(
            ("write_file", {"path": v["path"], "content": v["note"]}, f"File written: {v['path']}")
        )
        steps.append(("read_file", {"path": v["path"]}, out))
    elif kind == "wc":
        items = rng.sample(_ITEMS, rng.randint(3, 8))
        v.update(
            path=f"{HOME}/items_{k}{rng.randint(10, 999)}.txt", n=len(items), items=", ".join(items)
        )
        out = f"{len(items)} {v['path']}"
        steps.append(
            (
                "write_file",
                {"path": v["path"], "content": "\n".join(items) + "\n"},
                f"File written: {v['path']}",
            )
        )
        steps.append(
            (
                "run_command",
                {"command": f"wc -l {v['path']}"},
                format_command_output(out + "\n", "", 0),
            )
        )
    else:  # json_port
        v.update(
            path=f"{HOME}/{rng.choice(_SERVICES)}_{k}.json",
            name=rng.choice(_SERVICES),
            port=rng.randint(1024, 65000),
        )
        content = (
            json.dumps({"name": v["name"], "port": v["port"], "debug": False}, indent=2) + "\n"
        )
        out = str(v["port"])
        steps.append(
            ("write_file", {"path": v["path"], "content": content}, f"File written: {v['path']}")
        )
        steps.append(
            (
                "run_command",
                {
                    "command": f"python3 -c \"import json; print(json.load(open('{v['path']}'))['port'])\""
                },
                format_command_output(out + "\n", "", 0),
            )
        )
    v["out"] = out.rstrip("\n")
    ask = rng.choice(_ASK[kind][lang]).format(**v)
    answer = _ANSWER[kind][lang].format(**v)
    return ask, steps, answer


_TASKS = tuple(_ASK)


def _agent_row(rng: random.Random, lang: str, target_bytes: int) -> list[dict[str, Any]]:
    b = _Builder(rng, lang)
    b.messages.append({"role": "system", "content": rng.choice(_SYSTEM[lang])})
    style = rng.choice(("inline", "field", "inline", "none"))
    rounds = 0
    sep = " " if lang == "en" else ""
    while rounds < 6:
        mark = len(b.messages)
        ask, steps, answer = _task(rng, lang, rng.choice(_TASKS), len(b.messages))
        if rounds:
            ask = f"{_FOLLOW_UP[lang]} {ask}" if lang in ("en", "ko") else _FOLLOW_UP[lang] + ask
        b.messages.append({"role": "user", "content": ask})
        for i, (tool, args, output) in enumerate(steps):
            reasoning = b.think() if style != "none" and (i == 0 or rng.random() < 0.3) else ""
            intro = rng.choice(_STEP_INTRO[lang])
            b.tool_step(tool, args, output, intro, reasoning, style)
        closing = b.fillers(rng.randint(1, 2))
        b.assistant(answer + "\n\n" + sep.join(closing))
        rounds += 1
        size = _size(b.messages)
        if rounds > 1 and size > target_bytes * 1.05:
            del b.messages[mark:]  # this round overshoots: stop with the previous one
            break
        if size + 600 > target_bytes:
            break
    _pad_last_answer(b, target_bytes)
    return b.messages


def _qa_row(rng: random.Random, lang: str, target_bytes: int) -> list[dict[str, Any]]:
    """A conversation without tools: one question per round, topics in a random order."""
    b = _Builder(rng, lang)
    sep = " " if lang == "en" else ""
    style = rng.choice(("inline", "field", "none"))
    ticket = rng.randint(1000, 99999)
    for i, (question, sentences) in enumerate(rng.sample(_QA[lang], len(_QA[lang]))):
        if i == 0:
            question += _TICKET[lang][0].format(n=ticket)
        else:
            question = (
                f"{_FOLLOW_UP[lang]} {question}"
                if lang in ("en", "ko")
                else _FOLLOW_UP[lang] + question
            )
        b.messages.append({"role": "user", "content": question})
        reasoning = b.think(3) if style != "none" and i == 0 else ""
        answer = sep.join(rng.sample(sentences, rng.randint(3, len(sentences))))
        b.assistant(
            (_TICKET[lang][1].format(n=ticket) if i == 0 else "") + answer,
            reasoning,
            think_style=style,
        )
        if not target_bytes or _size(b.messages) + 400 > target_bytes:
            break
    _pad_last_answer(b, target_bytes)
    return b.messages


def _pad_last_answer(b: _Builder, target_bytes: int) -> None:
    """Append unused filler sentences to the final answer until the row reaches the target."""
    if not target_bytes:
        return
    last = b.messages[-1]
    sep = " " if b.lang == "en" else ""
    extra = [
        s for s in b.rng.sample(_FILLER[b.lang], len(_FILLER[b.lang])) if s not in last["content"]
    ]
    while extra and _size(b.messages) < target_bytes:
        last["content"] += sep + extra.pop()


def _size(messages: list[dict[str, Any]]) -> int:
    return len(json.dumps(messages, ensure_ascii=False).encode())


# --------------------------------------------------------------------------- defects
def _garble(rng: random.Random, n: int) -> str:
    scripts = rng.sample(sorted(_GARBLE), rng.randint(4, 7))
    return " ".join(
        "".join(rng.choice(_GARBLE[rng.choice(scripts)]) for _ in range(rng.randint(1, 2)))
        for _ in range(n)
    )


def _inject_soup(rng: random.Random, msg: dict[str, Any]) -> str:
    variant = rng.choice(
        ("mixed_script", "garbled_tail", "replacement_chars", "special_tokens", "char_repeat")
    )
    text = msg.get("content") or ""
    head = text[: max(len(text) // 3, 20)]
    if variant == "mixed_script":
        msg["content"] = head + " " + _garble(rng, rng.randint(30, 80))
    elif variant == "garbled_tail":  # a whole, clean answer that derails at the very end
        msg["content"] = text + " " + _garble(rng, rng.randint(12, 20))
    elif variant == "replacement_chars":
        mangled = "".join(ch if rng.random() > 0.15 else "\ufffd" for ch in text[:400] or "output")
        msg["content"] = mangled
    elif variant == "special_tokens":
        tokens = ["<|im_end|>", "<|im_start|>", "<|endoftext|>", "</s>", "<unk>", "<0x0A>", "[PAD]"]
        msg["content"] = head + "".join(rng.choice(tokens) for _ in range(rng.randint(22, 40)))
    else:
        msg["content"] = head + rng.choice("!?abあ한字") * rng.randint(25, 80)
    return variant


def _loop_text(
    rng: random.Random, lang: str, sentences: list[str], n: int, cut: bool = False
) -> str:
    """A dead loop: a hesitation marker before every restated sentence (or, with ``cut``,
    every half-finished one, as a model that keeps interrupting itself writes)."""
    sep = " " if lang == "en" else ""
    parts = []
    for _ in range(n):
        parts.append(rng.choice(_HESITATION[lang]))
        sentence = rng.choice(sentences)
        if cut:
            sentence = (
                sentence[: rng.randint(25, 50) if lang == "en" else rng.randint(8, 16)] + "..."
            )
        parts.append(sentence)
    return sep.join(parts)


def _inject_loop(rng: random.Random, lang: str, messages: list[dict[str, Any]], agent: bool) -> str:
    asst = [m for m in messages if m["role"] == "assistant"]
    sentences = _THINK[lang] + _FILLER[lang]
    variant = rng.choice(
        ("response_hesitation", "think_repetition", "think_hesitation")
        + (("tool_call_repeat",) if agent else ())
    )
    if variant == "tool_call_repeat":
        # The agent re-runs the same call and keeps getting the same answer.
        i = next(
            j for j, m in enumerate(messages) if m["role"] == "assistant" and m.get("tool_calls")
        )
        call, result = messages[i], messages[i + 1]
        repeats = []
        for _ in range(rng.randint(4, 6)):
            c = copy.deepcopy(call)
            cid = f"call_{rng.getrandbits(48):012x}"
            c["tool_calls"][0]["id"] = cid
            c["content"] = rng.choice(_STEP_INTRO[lang])
            repeats += [c, dict(result, tool_call_id=cid)]
        messages[i + 2 : i + 2] = repeats
        return variant
    targets = rng.sample(asst, min(len(asst), 2 if agent else 1)) if agent else [asst[-1]]
    if agent and len(targets) < 2:
        targets = asst
    for msg in targets:
        if variant == "response_hesitation":
            msg["content"] = (
                (msg.get("content") or "")
                + ("\n\n" if msg.get("content") else "")
                + _loop_text(rng, lang, sentences, rng.randint(6, 12))
            )
        else:
            if variant == "think_repetition":
                block = (" " if lang == "en" else "").join(rng.sample(_THINK[lang], 3))
                loop = (" " if lang == "en" else "").join([block] * rng.randint(6, 10))
            else:
                loop = _loop_text(rng, lang, _THINK[lang], rng.randint(12, 20), cut=True)
            content = msg.get("content") or ""
            if "reasoning_content" in msg or rng.random() < 0.5:
                msg["reasoning_content"] = loop
            else:
                msg["content"] = (
                    f"<think>\n{loop}\n</think>\n\n" + content.split("</think>")[-1].lstrip()
                )
    return variant


def _defect_row(
    rng: random.Random,
    lang: str,
    defect: str,
    agent: bool,
    target_bytes: int,
    history: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], str, str | None]:
    """Messages for a defective row, the variant name, and the id it duplicates (if any)."""
    if defect in ("exact_duplicate", "near_duplicate"):
        same = [r for r in history if label_of(r)["lang"] == lang and label_of(r)["agent"] == agent]
        if same:
            src = rng.choice(same)
            msgs = copy.deepcopy(src["messages"])
            if defect == "near_duplicate":
                last = msgs[-1]
                last["content"] = (
                    (last.get("content") or "")
                    + (" " if lang == "en" else "")
                    + rng.choice(_FILLER[lang])
                )
            return msgs, "copy", src["id"]
        defect = "dead_loop"
    if defect == "trivial_greeting":
        hi, hello = rng.choice(_GREETINGS[lang])
        return (
            [{"role": "user", "content": hi}, {"role": "assistant", "content": hello}],
            "greeting",
            None,
        )
    if defect == "refusal":
        text = rng.choice(_REFUSALS[lang]) + rng.choice(_REFUSAL_TAIL[lang])
        if agent:
            b = _Builder(rng, lang)
            b.messages.append({"role": "system", "content": rng.choice(_SYSTEM[lang])})
            b.messages.append({"role": "user", "content": _HARMFUL_ASK[lang]})
            b.tool_step(
                "read_file", {"path": f"{HOME}/task.txt"}, _HARMFUL_TASK, "", b.think(2), "field"
            )
            b.assistant(text)
            return b.messages, "after_tool_call", None
        return (
            [
                {"role": "user", "content": rng.choice(_QA[lang])[0]},
                {"role": "assistant", "content": text},
            ],
            "first_reply",
            None,
        )
    msgs = _agent_row(rng, lang, target_bytes) if agent else _qa_row(rng, lang, target_bytes)
    if defect == "dead_loop":
        return msgs, _inject_loop(rng, lang, msgs, agent), None
    if defect == "token_soup":
        asst = [m for m in msgs if m["role"] == "assistant"]
        return msgs, _inject_soup(rng, asst[-1]), None
    # round_too_long: a pasted log (plain rows) or two huge file reads (agent rows) in one round
    log = "".join(
        f"2026-11-30T03:{i // 60 % 60:02d}:{i % 60:02d}Z worker-{i % 7} processed batch {i} in {rng.randint(5, 900)} ms\n"
        for i in range(1100)
    )
    if agent:
        users = [i for i, m in enumerate(msgs) if m["role"] == "user"]
        b = _Builder(rng, lang)
        b.tool_step("read_file", {"path": f"{HOME}/worker.log"}, log[:32000])
        b.tool_step("read_file", {"path": f"{HOME}/worker.old.log"}, log[-32000:])
        msgs[users[0] + 1 : users[0] + 1] = b.messages
        return msgs, "huge_tool_outputs", None
    msgs[0]["content"] = msgs[0]["content"] + "\n\n" + log + log[:8000]
    return msgs, "huge_paste", None


# ------------------------------------------------------------------------------- API
def label_of(row: dict[str, Any]) -> dict[str, Any]:
    """The synthetic labels of a row: ``defect``, ``variant``, ``lang``, ``agent``, ``dup_of``."""
    ud = row.get("user_data") if isinstance(row, dict) else None
    return {
        "defect": user_data_get(ud, "synthetic_defect", "none"),
        "variant": user_data_get(ud, "synthetic_variant", ""),
        "lang": user_data_get(ud, "synthetic_lang", ""),
        "agent": bool(user_data_get(ud, "synthetic_agent", False)),
        "dup_of": user_data_get(ud, "synthetic_dup_of", None),
    }


def generate(
    rows: int,
    seed: int = 0,
    defects: bool = False,
    defect_rate: float = 0.35,
    target_bytes: int = 0,
    langs: tuple[str, ...] = LANGS,
    agent_rate: float = 0.8,
) -> list[dict[str, Any]]:
    """``rows`` conversations from ``seed``; with ``defects``, ``defect_rate`` of them defective.

    ``target_bytes`` (e.g. 4096) grows rows (more rounds, longer answers) to about that
    size as JSON. Languages and defect types cycle so every combination is represented.
    """
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    if not 0 <= defect_rate <= 1:
        raise ValueError(f"defect_rate must be in [0, 1], got {defect_rate}")
    unknown = set(langs) - set(LANGS)
    if unknown:
        raise ValueError(f"unknown languages {sorted(unknown)}; choose from {LANGS}")
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    clean: list[dict[str, Any]] = []
    n_defects = 0
    for i in range(rows):
        lang = langs[i % len(langs)]
        agent = rng.random() < agent_rate
        defect = "none"
        variant = ""
        dup_of = None
        if defects and i >= 8 and rng.random() < defect_rate:
            defect = DEFECTS[n_defects % len(DEFECTS)]
            n_defects += 1
            messages, variant, dup_of = _defect_row(
                rng, lang, defect, agent, target_bytes, clean[-200:]
            )
            if defect in ("exact_duplicate", "near_duplicate") and dup_of is None:
                defect = "dead_loop"
        else:
            messages = (
                _agent_row(rng, lang, target_bytes) if agent else _qa_row(rng, lang, target_bytes)
            )
        is_agent = any(m.get("tool_calls") for m in messages if m["role"] == "assistant")
        user_data = [
            ("synthetic_defect", pack_value(defect)),
            ("synthetic_variant", pack_value(variant)),
            ("synthetic_lang", pack_value(lang)),
            ("synthetic_agent", pack_value(is_agent)),
        ]
        if dup_of:
            user_data.append(("synthetic_dup_of", pack_value(dup_of)))
        row = {
            "id": f"syn-{seed}-{i:06d}",
            "model_id": MODELS[rng.randrange(len(MODELS))],
            "messages": messages,
            "tools": copy.deepcopy(TOOLS),
            "user_data": [list(p) for p in user_data],
        }
        out.append(row)
        if defect == "none":
            clean.append(row)
    return out


def write_jsonl(rows: list[dict[str, Any]], path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m twinkle.synthetic", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "-o", "--output", required=True, help="JSONL file to write ('-' for stdout)"
    )
    parser.add_argument("--defects", action="store_true", help="inject labelled defects")
    parser.add_argument("--defect-rate", type=float, default=0.35)
    parser.add_argument(
        "--target-bytes", type=int, default=0, help="grow rows to about this many bytes"
    )
    parser.add_argument(
        "--langs", default=",".join(LANGS), help="comma-separated subset of en,zh,ja,ko"
    )
    args = parser.parse_args(argv)
    try:
        rows = generate(
            args.rows,
            args.seed,
            args.defects,
            args.defect_rate,
            args.target_bytes,
            tuple(x for x in args.langs.split(",") if x),
        )
    except ValueError as exc:
        parser.error(str(exc))
    if args.output == "-":
        for row in rows:
            sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
    else:
        write_jsonl(rows, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

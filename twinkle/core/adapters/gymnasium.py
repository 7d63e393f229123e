"""The ``gymnasium`` adapter: text-rendered discrete Gymnasium environments.

FrozenLake, Taxi, CliffWalking and Blackjack are rendered as text (the board with the agent
drawn on it, as Gymnasium's ``ansi`` mode shows it but without colour codes, plus a line
that decodes the Taxi state); the model's reply
is read by an extractor (``<action>``/``<answer>`` tags, else the last line) and resolved to
an action index by an :class:`ActionMapper`, so "left", "move down", "south" or "1" work.

``StepResult.extracted_action`` is the extracted text, ``resolved_action`` the action's
native name (``ActionMapper.format_action``), None when the text names no action (the
environment is then not stepped; an ``invalid_action`` signal gives the penalty).
``state.observation.state.data`` carries ``gym_info``, ``gym_reward`` and ``episode_step``.

Example:
    >>> from twinkle.core.registry import environment_registry
    >>> env = environment_registry.get("FrozenLake-v1", adapter="gymnasium", is_slippery=False)
    >>> s, _ = env.reset(seed=0)
    >>> r = env.step(s, Action.from_text("move down"))
    >>> r.extracted_action, r.resolved_action, r.next_state.observation.state.data["episode_step"]
    ('move down', 'down', 1)
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any, NamedTuple

from twinkle.core.adapters._common import (
    BaseAdapter,
    EpisodeMembers,
    FastTagExtractor,
    answer_function,
)
from twinkle.core.adapters.action_mapper import ActionMapper
from twinkle.core.cleaning import SPECIAL_TOKENS
from twinkle.core.environment import EnvironmentSpec, StepResult, _StateContinuityTracker
from twinkle.core.extraction import (
    CleanedExtractor,
    CompositeExtractor,
    LastLineExtractor,
)
from twinkle.core.signals import RewardType, Signal, SignalBundle
from twinkle.core.state import Action, Observation, ObservationContent, State, StateMetadata

__all__ = ["GAMES", "GymnasiumAdapter", "GymnasiumEnvironment"]

_DIRS = {"left": ["west", "go left", "move left"], "right": ["east", "go right", "move right"]}
_DIRS |= {"up": ["north", "go up", "move up"], "down": ["south", "go down", "move down"]}

#: id -> (action names, aliases, goal text). Each is a Discrete action space.
GAMES: dict[str, tuple[tuple[str, ...], dict[str, list[str]], str]] = {
    "FrozenLake-v1": (
        ("left", "down", "right", "up"),
        _DIRS,
        "Walk from S to the goal G on the frozen lake without falling into a hole H. "
        "Your position is P.",
    ),
    "FrozenLake8x8-v1": (
        ("left", "down", "right", "up"),
        _DIRS,
        "Walk from S to the goal G on the frozen lake without falling into a hole H. "
        "Your position is P.",
    ),
    "CliffWalking-v1": (
        ("up", "right", "down", "left"),
        _DIRS,
        "Walk from your position x to the target T without stepping on the cliff C "
        "(each step costs 1, the cliff 100).",
    ),
    "Taxi-v4": (
        ("down", "up", "right", "left", "pickup", "dropoff"),
        {**_DIRS, "pickup": ["pick up", "pick"], "dropoff": ["drop off", "drop"]},
        "Drive the taxi to the passenger, pick them up, drive to the destination and drop "
        "them off. Walls are '|'.",
    ),
    "Blackjack-v1": (
        ("stick", "hit"),
        {"stick": ["stand", "stay", "hold"], "hit": ["draw", "hit me"]},
        "Play blackjack against the dealer: get closer to 21 than the dealer without going over.",
    ),
}

_TAXI_PLACES = ("R", "G", "Y", "B")

_observation, _content = Observation._make, ObservationContent._make
_state, _metadata, _step_result = State._make, StateMetadata._make, StepResult._make
_tuple_new = tuple.__new__

PROMPT = (
    "{goal}\n\nActions: {actions}.\nReply with the action to take, e.g. "
    "<action>{first}</action>.\n\n{board}"
)


class GymHidden(NamedTuple):
    """What the model does not see: the raw observation and the running return. A named
    tuple: as immutable as a frozen dataclass, and built once per step at a third of the
    cost."""

    obs: Any
    total_reward: float
    seed: int | None


_SCALARS = frozenset({int, float, bool, str, type(None)})
#: Distinct rewards whose signal bundle is kept (the games have a handful each).
_BUNDLE_CACHE = 256
#: Boards kept per environment: every state of the supported games (Taxi has 500).
_BOARD_CACHE = 4096
#: Distinct ``<action>`` contents, and whole replies up to ``_REPLY_CHARS`` long, whose
#: reading is kept (bounds, for free-form replies).
_READ_CACHE, _REPLY_CHARS = 4096, 256
#: The fused ``<action>`` read in ``step`` relies on every special token starting with '<'.
_FUSABLE = all(token.startswith("<") for token in SPECIAL_TOKENS)


def _plain(value: Any) -> Any:
    """JSON-friendly copy of a gym value (numpy scalars and arrays to Python)."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict or isinstance(value, dict):
        # One pass, no comprehension frame: Taxi's info (a float and an array) is on the
        # per-step path.
        out = {}
        for k, v in value.items():
            out[k if type(k) is str else str(k)] = v if type(v) in _SCALARS else _plain(v)
        return out
    if kind is tuple or kind is list or isinstance(value, (list, tuple)):
        return [v if type(v) in _SCALARS else _plain(v) for v in value]
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


class GymnasiumEnvironment(EpisodeMembers):
    """One text-rendered Gymnasium game; ``**make_kwargs`` go to ``gymnasium.make``.

    Args:
        name: a key of :data:`GAMES`.
        max_steps: the step budget (default: the game's time limit, else 100).
        invalid_action_penalty: the (negative) reward of a reply that names no action.
        system_prompt: put before the first prompt as a system message.
        pre_cleaners, post_cleaners: around the action extractor.
        seed: default seed when ``reset`` gets none (``task_index`` i uses ``seed + i``).
    """

    def __init__(
        self,
        name: str,
        *,
        max_steps: int | None = None,
        invalid_action_penalty: float = 0.0,
        system_prompt: str | None = None,
        pre_cleaners: Any = None,
        post_cleaners: Any = None,
        seed: int = 0,
        **make_kwargs: Any,
    ) -> None:
        from twinkle.errors import require

        gym = require("gymnasium", "the 'gymnasium' environment adapter", "envs")
        if name not in GAMES:
            raise KeyError(f"gymnasium game {name!r} is not supported; choose from {list(GAMES)}")
        names, aliases, self._goal = GAMES[name]
        self.mapper = ActionMapper(names, aliases)
        self._env = gym.make(name, **make_kwargs)
        # Steps go to the unwrapped env: this class keeps the step budget and the reset
        # order itself, so the checker/order/time-limit wrappers would only cost time.
        self._raw = self._env.unwrapped
        self._board: tuple[list[str], str, int, int] | None = None
        # Boards depend only on the observation and rewards are few, so both are built once:
        # a step then allocates only what differs from the previous one.
        self._boards: dict[Any, str] = {}
        self._firsts: dict[Any, Observation] = {}
        # the env's reward (CliffWalking's and Taxi's are ints) -> (as a float, its bundle)
        self._bundles: dict[Any, tuple[float, SignalBundle]] = {}
        self._episodes = itertools.count()
        self._id_prefix = uuid.uuid4().hex[:20]
        self._prompt_head = PROMPT.format(
            goal=self._goal, actions=", ".join(names), first=names[0], board=""
        )
        self._task_content = ObservationContent(text=self._goal)
        self._checked = False  # the first reset goes through gymnasium's checker wrappers
        if self._env.action_space.n != self.mapper.n:
            raise ValueError(f"{name}: {self._env.action_space.n} actions, mapper has {names}")
        limit = self._env.spec.max_episode_steps if self._env.spec else None
        self._seed = seed
        self._penalty = invalid_action_penalty
        self._system_prompt = system_prompt
        self._inner = CompositeExtractor(
            extractors=[
                FastTagExtractor("action"),
                FastTagExtractor("answer"),
                LastLineExtractor(),
            ]
        )
        self.set_cleaners(pre_cleaners, post_cleaners)
        self._tracker = _StateContinuityTracker()
        # The state the tracker would hold: it is told only when another state is stepped
        # (see ``step``), which is all its check reads, so a step skips the bookkeeping.
        self._latest: State[GymHidden] | None = None
        self._spec = EnvironmentSpec(
            name=name,
            adapter="gymnasium",
            max_steps=max_steps or limit or 100,
            observation_type="text",
            action_type="discrete",
            is_multi_turn=True,
            supports_len=False,
            pure_step=False,
            metadata={"actions": list(names), "make_kwargs": dict(make_kwargs)},
        )
        self._max_steps = self._spec.max_steps  # the spec is frozen

    def set_cleaners(self, pre: Any = None, post: Any = None) -> None:
        self.extractor = CleanedExtractor(
            self._inner,
            pre_cleaners=("strip_special_tokens", "strip_thinking_tokens") if pre is None else pre,
            post_cleaners=("strip_trailing_punctuation",) if post is None else post,
        )
        self._answer = answer_function(self.extractor)
        self._answer_for = self.extractor
        # The fused tag read in ``step`` is exact only for the default cleaners (see there).
        fused = _FUSABLE and pre is None and post is None
        self._fused_for = self.extractor if fused else None
        # ``<action>`` content -> (extracted, index, name), for the fused read only, by
        # ``_read_mapper`` under its resolution cache ``_read_under`` (see ``step``)
        self._read: dict[str, tuple[str | None, int | None, str | None]] = {}
        self._replies: dict[str, tuple[str | None, int | None, str | None]] = {}  # whole replies
        self._read_mapper: ActionMapper | None = None
        self._read_under: dict[str, int | None] | None = None

    def _board_of(self, obs: Any) -> str:
        """:meth:`render_text` of ``obs``, cached."""
        try:
            board = self._boards.get(obs)
        except TypeError:  # an unhashable observation
            return self.render_text(obs)
        if board is None:
            board = self.render_text(obs)
            if len(self._boards) < _BOARD_CACHE:
                self._boards[obs] = board
        return board

    def _first_observation(self, obs: Any, info: Any, gym_info: dict[str, Any]) -> Observation:
        """The observation after a reset to ``obs`` (``gym_info`` is ``_plain(info)``). It
        depends only on ``obs`` and the reset's info, so like a single-turn task's prompt it
        is built once and shared (it is frozen; its dicts are its own)."""
        try:
            cached = self._firsts.get(obs)
            hashable = True
        except TypeError:  # an unhashable observation
            cached, hashable = None, False
        if cached is not None and cached.state.data["gym_info"] == gym_info:
            return cached
        board = self._board_of(obs)
        prompt = self._prompt_head + board
        messages: tuple[dict[str, Any], ...] = ({"role": "user", "content": prompt},)
        if self._system_prompt:
            messages = ({"role": "system", "content": self._system_prompt}, *messages)
        data = {"gym_info": _plain(info), "gym_reward": 0.0, "episode_step": 0}
        observation = Observation(
            prompt,
            messages,
            task=self._task_content,
            state=ObservationContent(text=board, data=data),
        )
        if hashable and len(self._firsts) < _BOARD_CACHE:
            self._firsts[obs] = observation
        return observation

    def _reward_bundle(self, raw: Any) -> tuple[float, SignalBundle]:
        """The env's reward ``raw`` as a float and the step's ``gym_reward`` signal. A bundle is
        immutable, so there is one per distinct reward; equal rewards (``-1`` and ``-1.0``)
        share an entry, which holds the same float for each."""
        try:
            cached, keep = self._bundles.get(raw), True
        except TypeError:  # an unhashable reward (a 0-d array)
            cached, keep = None, False
        if cached is None:
            reward = raw if type(raw) is float else float(raw)
            cached = (reward, SignalBundle((Signal("gym_reward", RewardType.STEP, reward),)))
            # NaN is not kept: it is not equal to itself, so it would never be found again
            if keep and reward == reward and len(self._bundles) < _BUNDLE_CACHE:
                self._bundles[raw] = cached
        return cached

    # -- protocol --------------------------------------------------------------------------

    @property
    def prompts(self) -> dict[str, str]:
        return {"goal": self._goal}

    @property
    def gym_env(self) -> Any:
        """The wrapped ``gymnasium`` environment."""
        return self._env

    def _grid(self) -> tuple[list[str], str, int, int]:
        """The static board rows, the agent mark, and the agent cell's row offset and width."""
        raw = self._raw
        name = self._spec.name
        if name.startswith("FrozenLake"):
            return [b"".join(row).decode() for row in raw.desc], "P", 0, 1
        if name.startswith("CliffWalking"):
            rows, cols = raw.shape
            cells = [["o"] * cols for _ in range(rows)]
            for r, c in _cliff_cells(raw.P, rows, cols):
                cells[r][c] = "C"
            cells[rows - 1][cols - 1] = "T"
            return ["  ".join(r) for r in cells], "x", 0, 3
        return [b"".join(row).decode() for row in raw.desc], "T", 1, 2  # Taxi

    def render_text(self, obs: Any) -> str:
        """The text a model reads for observation ``obs`` (the agent drawn on the board)."""
        name = self._spec.name
        if name.startswith("Blackjack"):
            player, dealer, ace = obs
            return (
                f"Your hand totals {player}{' (with a usable ace)' if ace else ''}. "
                f"The dealer shows {dealer}."
            )
        if self._board is None:
            self._board = self._grid()
        rows, mark, row_offset, width = self._board
        if name.startswith("Taxi"):
            row, col, passenger, dest = self._raw.decode(obs)
        else:
            row, col = divmod(int(obs), self._raw.ncol if hasattr(self._raw, "ncol") else 12)
        r, i = row + row_offset, col * width + (1 if name.startswith("Taxi") else 0)
        line = rows[r]
        if not name.startswith("Taxi") or line[i] == " ":
            line = line[:i] + mark + line[i + 1 :]
        board = "\n".join([*rows[:r], line, *rows[r + 1 :]])
        if name.startswith("Taxi"):
            where = "in the taxi" if passenger == 4 else f"at {_TAXI_PLACES[passenger]}"
            board += (
                f"\nTaxi (T) at row {row}, column {col}; passenger {where}; "
                f"destination {_TAXI_PLACES[dest]}."
            )
        return board

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[State[GymHidden], dict[str, Any]]:
        index = (options or {}).get("task_index")
        if seed is None:
            seed = self._seed + (index or 0)
        if self._checked:
            obs, info = self._raw.reset(seed=seed)
        else:
            obs, info = self._env.reset(seed=seed)
            self._checked = True
        gym_info = _plain(info)
        observation = self._first_observation(obs, info, gym_info)
        # A per-environment random prefix and a counter: unique like uuid4, without the
        # system call on every reset.
        episode_id = f"{self._id_prefix}{next(self._episodes):012x}"
        # Equal to ``State(observation, GymHidden(...), StateMetadata(0, episode_id))``.
        hidden = _tuple_new(GymHidden, (_plain(obs), 0.0, seed))
        state = _state(observation, hidden, _metadata(0, episode_id, False, {}))
        self._tracker.track(state)
        self._latest = state
        return state, {"seed": seed, "gym_info": gym_info}

    def step(self, state: State[GymHidden], action: Action) -> StepResult[GymHidden]:
        latest = self._latest
        if state is not latest:
            tracker = self._tracker
            if latest is not None and tracker.latest is not latest:
                tracker.track(latest)  # catch the tracker up, then let it judge
            tracker.validate(state, self._spec.name)
        meta = state.metadata
        if meta.is_terminal:
            raise ValueError(f"{self._spec.name}: the episode has ended; call reset()")
        reply = action.text or ""
        extractor = self.extractor
        mapper = self.mapper
        # The prompted reply, "...<action>NAME</action>" with no other '<', is read in place:
        # no special token or think tag can be in it (each starts with '<'), so the default
        # pre-cleaners return it unchanged, the tag extractor finds this pair, and the
        # post-cleaner strips: the same answer at a fifth of the cost. The tag's content is an
        # action name in nearly every reply, so its reading (extracted text, action index,
        # action name) is looked up, not rebuilt (``_read_tag``). An ActionMapper replaces its
        # resolution cache whenever its resolutions may change (``allow_index``), so the memo
        # is used only with the mapper, and that cache, it was filled under. A policy prompted
        # this way repeats its replies word for word, so a short one is looked up whole first.
        fused = extractor is self._fused_for
        if (
            fused
            and mapper is self._read_mapper
            and mapper._parsed is self._read_under
            and (read := self._replies.get(reply)) is not None
        ):
            extracted, index, resolved = read
        elif (
            fused
            and reply.count("<") == 2
            and (begin := reply.find("<action>")) >= 0
            and (end := reply.find("</action>", begin + 8)) >= 0
        ):
            inner = reply[begin + 8 : end]
            if (
                mapper is not self._read_mapper
                or mapper._parsed is not self._read_under
                or (read := self._read.get(inner)) is None
            ):
                read = self._read_tag(inner, mapper)
            if (
                mapper is self._read_mapper
                and len(reply) <= _REPLY_CHARS
                and len(self._replies) < _READ_CACHE
            ):
                self._replies[reply] = read
            extracted, index, resolved = read
        else:
            if self._answer_for is not extractor:  # the extractor was replaced
                self._answer, self._answer_for = answer_function(extractor), extractor
            extracted = self._answer(reply)
            index = mapper.parse(extracted)
            resolved = None if index is None else mapper.format_action(index)
        step = meta.step + 1
        observation, hidden = state.observation, state.hidden
        if index is None:
            reward, terminated, gym_truncated, info = 0.0, False, False, {}
            old = observation.state
            obs, board = hidden.obs, old.text if old else ""
            feedback = (
                f"'{extracted}' is not an action; choose one of {', '.join(mapper.names)}."
                if extracted is not None
                else "No action found; reply with <action>NAME</action>."
            )
            text = f"{feedback}\n\n{board}"
            rewards = SignalBundle(
                (
                    Signal("gym_reward", RewardType.STEP, 0.0),
                    Signal("invalid_action", RewardType.FORMAT, -self._penalty, feedback=feedback),
                )
            )
        else:
            obs, reward, terminated, gym_truncated, info = self._raw.step(index)
            # The float and the bundle of a reward come from one lookup (``_reward_bundle``).
            try:
                reward, rewards = self._bundles[reward]
            except (KeyError, TypeError):  # a new reward, or an unhashable one
                reward, rewards = self._reward_bundle(reward)
            # The games return Python values; the conversions are for other types (numpy).
            if type(terminated) is not bool:
                terminated = bool(terminated)
            if type(gym_truncated) is not bool:
                gym_truncated = bool(gym_truncated)
            try:  # every board of the supported games is cached after its first step
                text = board = self._boards[obs]
            except (KeyError, TypeError):
                text = board = self._board_of(obs)
            obs = obs if type(obs) in _SCALARS else _plain(obs)
            # ``_plain(info)`` inlined for the games' flat info dicts: the grid games'
            # ``{"prob": p}`` in two checks, any other dict key by key. Such a dict is kept, not
            # copied: the unwrapped toy-text games build a new info dict in every ``step`` and
            # keep no reference to it, so no one else holds it.
            if type(info) is dict:
                # (a missing "prob" gives the dict itself, which is not a scalar)
                if len(info) != 1 or type(info.get("prob", info)) not in _SCALARS:
                    for key, value in info.items():
                        if type(key) is not str or type(value) not in _SCALARS:
                            info = _plain(info)
                            break
            else:
                info = _plain(info)
        truncated = gym_truncated or (not terminated and step >= self._max_steps)
        # Every value below is built here, so the fast constructors' lack of checks is safe;
        # the generated __init__s (one object.__setattr__ per field) of the five frozen
        # objects would cost about a third of the step.
        total = hidden.total_reward + reward
        # One tuple concatenation: the history grows every step, and ``(*old, a, b)`` would
        # copy it twice (into a list, then a tuple).
        messages = observation.messages + (
            {"role": "assistant", "content": reply},
            {"role": "user", "content": text},
        )
        data = {"gym_info": info, "gym_reward": reward, "episode_step": step}
        next_state = _state(
            _observation(text, messages, (), (), (), observation.task, _content(board, (), data)),
            _tuple_new(GymHidden, (obs, total, hidden.seed)),
            _metadata(
                step,
                meta.episode_id,
                terminated or truncated,
                {"extracted_answer": extracted, "total_reward": total},
            ),
        )
        self._latest = next_state
        return _step_result(
            next_state,
            rewards,
            terminated,
            truncated,
            extracted,
            resolved,
            {"gym_info": info, "action_index": index},
        )

    def _read_tag(
        self, inner: str, mapper: ActionMapper
    ) -> tuple[str | None, int | None, str | None]:
        """The reading of an ``<action>`` tag's content ``inner`` (the default post-cleaner's
        output, its action index and name), the memo in ``step`` missed; kept in the memo."""
        extracted = inner.strip().rstrip(".,")
        index = mapper.parse(extracted)
        read = (extracted, index, None if index is None else mapper.format_action(index))
        if isinstance(mapper, ActionMapper):
            if mapper is not self._read_mapper or mapper._parsed is not self._read_under:
                # another mapper, or other rules
                self._read, self._replies = {}, {}
                self._read_mapper, self._read_under = mapper, mapper._parsed
            if len(self._read) < _READ_CACHE:
                self._read[inner] = read
        return read

    def compute_rewards(
        self, state: State[GymHidden], action: Action, next_state: State[GymHidden]
    ) -> SignalBundle:
        data = (next_state.observation.state.data or {}) if next_state.observation.state else {}
        return SignalBundle((Signal("gym_reward", RewardType.STEP, data.get("gym_reward", 0.0)),))

    def close(self) -> None:
        self._env.close()


def _cliff_cells(transitions: Any, rows: int, cols: int) -> set[tuple[int, int]]:
    """CliffWalking's cliff, read from the public transition table ``P``: a move into the
    cliff pays -100 (and sends the agent back to the start), so the cell it aims at is cliff.

    Example:
        >>> import gymnasium as gym
        >>> env = gym.make('CliffWalking-v1').unwrapped
        >>> sorted(_cliff_cells(env.P, 4, 12))[:2]
        [(3, 1), (3, 2)]
    """
    moves = {0: (-1, 0), 1: (0, 1), 2: (1, 0), 3: (0, -1)}  # up, right, down, left
    cliff = set()
    for state, actions in transitions.items():
        r, c = divmod(state, cols)
        for action, outcomes in actions.items():
            dr, dc = moves[action]
            if any(reward <= -100 for _, _, reward, _ in outcomes):
                cliff.add((min(max(r + dr, 0), rows - 1), min(max(c + dc, 0), cols - 1)))
    return cliff


class GymnasiumAdapter(BaseAdapter):
    """Adapter over ``gymnasium``'s text-renderable discrete games.

    Example:
        >>> "Taxi-v4" in GymnasiumAdapter().list_environments()
        True
    """

    name = "gymnasium"
    requires = ("gymnasium",)

    def list_environments(self) -> list[str]:
        return sorted(GAMES)

    def get_environment(self, name: str, **config: Any) -> GymnasiumEnvironment:
        self.ensure_installed()
        return GymnasiumEnvironment(name, **config)

    def get_environment_info(self, name: str) -> dict[str, Any]:
        info = super().get_environment_info(name)
        info["actions"] = list(GAMES[name][0])
        info["description"] = GAMES[name][2]
        return info

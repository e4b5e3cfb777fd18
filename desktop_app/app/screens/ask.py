"""Ask an agent from the app: a one-line question, answered as it streams.

:class:`AskScreen` takes the question; the agent runs screen drives
``Agent.stream`` in a thread worker and shows each text delta in its
conversation view as it arrives (:class:`StreamingAnswer`), then the run's
stored conversation once it ends.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from desktop_app.agent.runtime import AgentResponse
from desktop_app.app.screens.help import HELP_BINDING
from desktop_app.app.widgets.bars import Footer
from desktop_app.textsafe import visible_controls


class AskScreen(ModalScreen[str | None]):
    """One line of text for an agent: the question for a new agent run, or
    (with ``title`` and ``placeholder``) the answer to an agent run's
    ``ask_user`` question. Enter sends it, escape cancels (``None``).

    Args:
        title: the dialog's heading (plain text: a model's question is never markup).
        placeholder: what the empty field says.
    """

    BINDINGS = [Binding("escape", "cancel", "Cancel"), HELP_BINDING]

    def __init__(
        self, title: str = "Ask the agent", placeholder: str = "your question; enter asks"
    ) -> None:
        super().__init__()
        self.title_text = title
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(Text(visible_controls(self.title_text), style="bold"))
            yield Input(placeholder=self.placeholder, id="ask-input")
        yield Footer(show_command_palette=False)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        if text:
            self.dismiss(text)

    def action_cancel(self) -> None:
        self.dismiss(None)


class AnswerDelta(Message):
    """A piece of the answer being streamed (posted from the worker)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class AnswerToolEvent(Message):
    """A tool the agent started or finished while answering."""

    def __init__(self, line: str) -> None:
        super().__init__()
        self.line = line


class AnswerFinished(Message):
    """The run ended (``response``) or could not go on (``error``)."""

    def __init__(self, response: AgentResponse | None, error: str | None = None) -> None:
        super().__init__()
        self.response = response
        self.error = error


class StreamingAnswer(Static):
    """The question and the answer so far, growing with every delta (plain text,
    control characters shown as escapes)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id, markup=False)
        self.question = ""
        self.answer = ""
        self.tools: list[str] = []

    def start(self, question: str) -> None:
        self.question, self.answer, self.tools = question, "", []
        self.display = True
        self._render_now()

    def add(self, text: str) -> None:
        self.answer += text
        self._render_now()

    def tool(self, line: str) -> None:
        self.tools.append(line)
        self._render_now()

    def _render_now(self) -> None:
        text = Text()
        text.append("you\n", style="bold")
        # model and tool text: control characters shown as escapes, never sent raw
        text.append(visible_controls(self.question) + "\n\n")
        for line in self.tools:
            text.append(visible_controls(line) + "\n", style="dim")
        text.append("assistant (answering…)\n", style="bold")
        text.append(visible_controls(self.answer))
        self.update(text)

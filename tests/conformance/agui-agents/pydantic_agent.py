"""AG-UI agent built with pydantic-ai, driven by a scripted FunctionModel (no LLM, no network).

python pydantic_agent.py --port N   -> POST / takes a RunAgentInput, answers AG-UI SSE.
Scenarios, picked from the last user text (see README.md): "weather" (backend tool),
"confirm" (frontend tool `confirm_action`), "boom" (model error), "slow" (20 pieces, 0.1 s
apart), anything else (thinking + "Hello from pydantic-ai. You said: ...").
"""

import asyncio

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaThinkingPart, DeltaToolCall, FunctionModel
from pydantic_ai.ui.ag_ui import AGUIAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from _serve import serve


def pieces(text: str, n: int = 4) -> list[str]:
    """Split text in n roughly equal chunks, so the client sees several TEXT_MESSAGE_CONTENT deltas."""
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


def user_texts(messages: list[ModelMessage]) -> list[str]:
    return [
        p.content if isinstance(p.content, str) else " ".join(c for c in p.content if isinstance(c, str))
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart)
    ]


async def stream(messages: list[ModelMessage], info: AgentInfo):
    last = messages[-1]
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
    if returns:
        # Second model turn, after a tool ran: the backend tool here, the client for confirm_action.
        ret = returns[-1]
        text = f"You answered: {ret.content}" if ret.tool_name == "confirm_action" else f"The weather: {ret.content}."
        for piece in pieces(text):
            yield piece
        return

    texts = user_texts(messages)
    text = texts[-1] if texts else ""
    lowered = text.lower()
    if "weather" in lowered:
        # Arguments streamed in two deltas, as a real model does -> TOOL_CALL_ARGS twice.
        yield {0: DeltaToolCall(name="get_weather", json_args='{"city": ')}
        yield {0: DeltaToolCall(json_args='"Paris"}')}
    elif "confirm" in lowered and any(t.name == "confirm_action" for t in info.function_tools):
        # A frontend tool (from RunAgentInput.tools): the run ends with this call unanswered.
        yield {0: DeltaToolCall(name="confirm_action", json_args='{"question": "Do you confirm?"}')}
    elif "boom" in lowered:
        # The model fails mid-run -> RUN_ERROR after RUN_STARTED (HTTP status stays 200).
        raise RuntimeError("scripted model failure")
    elif "slow" in lowered:
        for i in range(20):
            yield f"slow piece {i}. "
            await asyncio.sleep(0.1)
    else:
        # Thinking deltas before the text -> REASONING_* events in the AG-UI stream.
        yield {0: DeltaThinkingPart(content="The user greeted me; ")}
        yield {0: DeltaThinkingPart(content="I will echo their text.")}
        answer = f"Hello from pydantic-ai. You said: {text}"
        if len(texts) > 1:
            answer += f" ({len(texts)} user messages)"
        for piece in pieces(answer):
            yield piece


agent = Agent(FunctionModel(stream_function=stream))


@agent.tool_plain
def get_weather(city: str) -> str:
    """Current weather for a city (a backend tool: runs here, its result streams as TOOL_CALL_RESULT)."""
    return f"Sunny in {city}, 21 °C"


async def run(request: Request):
    return await AGUIAdapter.dispatch_request(request, agent=agent)


async def ready(_: Request):
    return PlainTextResponse("ok")


app = Starlette(routes=[Route("/", run, methods=["POST"]), Route("/", ready, methods=["GET"])])

if __name__ == "__main__":
    serve(app)

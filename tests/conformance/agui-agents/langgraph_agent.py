"""AG-UI agent built with LangGraph + ag-ui-langgraph, answering with a fake chat model (no LLM).

python langgraph_agent.py --port N   -> POST / takes a RunAgentInput, answers AG-UI SSE;
GET /health answers 200 once up. Two nodes (prepare -> chat) so each run shows a
STEP_STARTED/STEP_FINISHED pair per node plus STATE_SNAPSHOT and MESSAGES_SNAPSHOT.
A last user text containing "boom" makes the chat node raise (-> RUN_ERROR). One containing
"confirm" makes it call LangGraph's interrupt() (-> CUSTOM on_interrupt, then RUN_FINISHED); the
run that resumes it (forwardedProps.command.resume) answers "You answered: <the answer>".
"""

from ag_ui_langgraph import LangGraphAgent, add_langgraph_fastapi_endpoint
from fastapi import FastAPI
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import MemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt

from _serve import serve


class State(MessagesState):
    # A non-message key so STATE_SNAPSHOT carries something the graph itself wrote.
    turns: int


def prepare(state: State) -> dict:
    return {"turns": state.get("turns", 0) + 1}


async def chat(state: State, config) -> dict:
    humans = [m for m in state["messages"] if isinstance(m, HumanMessage)]
    text = humans[-1].text if humans else ""
    if "boom" in text.lower():
        raise RuntimeError("scripted model failure")  # -> RUN_ERROR, as with the pydantic agent
    if "confirm" in text.lower():
        # Stops the run here; the run that resumes it runs this node again, and interrupt()
        # then returns the resume value.
        answered = interrupt(f"May I go on with: {text}?")
        answer = f"You answered: {answered}"
    else:
        answer = f"Hello from LangGraph. You said: {text}"
    if len(humans) > 1:
        answer += f" ({len(humans)} user messages)"
    # A fresh fake model per call: its iterator holds one answer, so nothing runs out across
    # requests. GenericFakeChatModel streams the answer word by word -> several TEXT_MESSAGE_CONTENT.
    model = GenericFakeChatModel(messages=iter([AIMessage(content=answer)]))
    # Passing `config` keeps the callbacks that let ag-ui-langgraph see the token stream.
    return {"messages": [await model.ainvoke(state["messages"], config)]}


builder = StateGraph(State)
builder.add_node("prepare", prepare)
builder.add_node("chat", chat)
builder.add_edge(START, "prepare")
builder.add_edge("prepare", "chat")
builder.add_edge("chat", END)
# ag-ui-langgraph reads the thread's state (graph.aget_state) before each run: a checkpointer is required.
graph = builder.compile(checkpointer=MemorySaver())

app = FastAPI()
add_langgraph_fastapi_endpoint(app, LangGraphAgent(name="fixture", graph=graph), "/")

if __name__ == "__main__":
    serve(app)

# Source: LlamaIndex documentation, "Sub Question Query Engine" (examples/query_engine/sub_question_query_engine),
#   https://docs.llamaindex.ai/en/stable/examples/query_engine/sub_question_query_engine/
# Swapped for offline stand-ins (nothing else changed):
#   - Settings.embed_model = a letter-count embedding (deterministic, no model, no network)
#   - Settings.llm = a scripted LLM instead of OpenAI: it writes the sub-questions as the question
#     generator's prompt asks (a JSON list), and answers every other prompt with a fixed sentence
#   - two small in-memory documents about a handbook instead of Paul Graham's essay
#   - question_gen=LLMQuestionGenerator (the generator LlamaIndex documents for a non-OpenAI LLM) instead
#     of the OpenAI function-calling one (the llama-index-question-gen-openai package, which needs OpenAI)
#   - the LlamaDebugHandler callback (printing the sub-questions) is left out: stdout is compared
import json
from typing import Any

from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.llms.custom import CustomLLM
from llama_index.core.query_engine import SubQuestionQueryEngine
from llama_index.core.question_gen import LLMQuestionGenerator
from llama_index.core.tools import QueryEngineTool, ToolMetadata


def letters(text: str) -> list[float]:
    return [float(text.lower().count(c)) + 0.1 for c in "abcdefghijklmnopqrstuvwxyz"]


class LetterEmbedding(BaseEmbedding):
    def _get_query_embedding(self, query: str) -> list[float]:
        return letters(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return letters(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return letters(text)


SUB_QUESTIONS = [
    {"sub_question": "What is the refund window?", "tool_name": "handbook"},
    {"sub_question": "How fast does support answer?", "tool_name": "handbook"},
    {"sub_question": "What changed in the refund policy?", "tool_name": "handbook"},
]


class ScriptedLLM(CustomLLM):
    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=3900, num_output=64, model_name="scripted")

    def _reply(self, prompt: str) -> str:
        if "sub_question" in prompt:
            return "```json\n" + json.dumps(SUB_QUESTIONS) + "\n```"
        return "The handbook answers it."

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self._reply(prompt))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield CompletionResponse(text=self._reply(prompt), delta=self._reply(prompt))


Settings.embed_model = LetterEmbedding()
Settings.llm = ScriptedLLM()

documents = [
    Document(text="Refunds take 30 days.", metadata={"name": "refund policy"}),
    Document(text="Support answers within 4 hours.", metadata={"name": "support policy"}),
]
vector_query_engine = VectorStoreIndex.from_documents(documents).as_query_engine(similarity_top_k=1)

query_engine_tools = [
    QueryEngineTool(
        query_engine=vector_query_engine,
        metadata=ToolMetadata(name="handbook", description="The company handbook: refunds and support"),
    ),
]

query_engine = SubQuestionQueryEngine.from_defaults(
    query_engine_tools=query_engine_tools,
    question_gen=LLMQuestionGenerator.from_defaults(llm=Settings.llm),
    use_async=True,
)
response = query_engine.query("How do refunds and support compare?")
print(response)

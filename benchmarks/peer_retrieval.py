"""A peer's default retriever (LangChain or LlamaIndex), built over the question set's documents and asked
every question: run by benchmarks/retrieval_quality.py in .venv-peers, on the same model as ours.

Each is set up as its getting-started guide does, with the answer count raised to 10 for the figures:
- langchain: its loaders (pypdf for PDF, Docx2txtLoader for DOCX, BeautifulSoup text for HTML, the file for
  text), ``RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200)``, ``InMemoryVectorStore``,
  ``as_retriever(search_kwargs={"k": 10})``;
- llamaindex: ``SimpleDirectoryReader``, ``VectorStoreIndex.from_documents`` with chunks that fit the model: its
  ``SentenceSplitter`` counting the model's own tokens, ``CHUNK_TOKENS`` a chunk with ``CHUNK_OVERLAP`` overlap
  (its default, 1,024 tokens, would be truncated by the 256-token model: most of each chunk never embedded),
  ``as_retriever(similarity_top_k=10)``.

Prints one JSON object: {"passages": {question id: [text, …]}, "chunks": n, "build_s": s, "query_ms": [...]}.

    .venv-peers/bin/python benchmarks/peer_retrieval.py langchain --model DIR --questions FILE FILE...
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# LlamaIndex's chunks, in the model's tokens: what is left of its 256 once the metadata LlamaIndex embeds with each
# chunk (the file's name, path, type, size and dates) and the special tokens are counted
CHUNK_TOKENS = 192
CHUNK_OVERLAP = 32


def _langchain_documents(paths: list[Path]) -> list:
    from langchain_core.documents import Document

    docs = []
    for path in paths:
        if path.suffix == ".pdf":
            from pypdf import PdfReader

            docs += [Document(page_content=page.extract_text() or "", metadata={"source": path.name, "page": n})
                     for n, page in enumerate(PdfReader(path).pages, start=1)]
        elif path.suffix == ".docx":
            import docx2txt

            docs.append(Document(page_content=docx2txt.process(str(path)), metadata={"source": path.name}))
        else:
            raw = path.read_bytes().decode("utf-8", errors="replace")
            if path.suffix in (".html", ".htm"):
                from bs4 import BeautifulSoup

                raw = BeautifulSoup(raw, "html.parser").get_text("\n")
            docs.append(Document(page_content=raw, metadata={"source": path.name}))
    return docs


def langchain(model: str, paths: list[Path]):
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_huggingface import HuggingFaceEmbeddings
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    embeddings = HuggingFaceEmbeddings(model_name=model, model_kwargs={"device": "cpu"},
                                       encode_kwargs={"normalize_embeddings": True})
    chunks = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200).split_documents(
        _langchain_documents(paths))
    store = InMemoryVectorStore.from_documents(chunks, embeddings)
    retriever = store.as_retriever(search_kwargs={"k": 10})
    return len(chunks), lambda q: [d.page_content for d in retriever.invoke(q)]


def llamaindex(model: str, paths: list[Path]):
    from llama_index.core import Settings, SimpleDirectoryReader, VectorStoreIndex
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from transformers import AutoTokenizer

    Settings.embed_model = HuggingFaceEmbedding(model_name=model, device="cpu", normalize=True)
    tokenizer = AutoTokenizer.from_pretrained(model)
    Settings.node_parser = SentenceSplitter(chunk_size=CHUNK_TOKENS, chunk_overlap=CHUNK_OVERLAP,
                                            tokenizer=tokenizer.tokenize)
    docs = SimpleDirectoryReader(input_files=[str(p) for p in paths]).load_data()
    index = VectorStoreIndex.from_documents(docs)
    retriever = index.as_retriever(similarity_top_k=10)
    return len(index.docstore.docs), lambda q: [n.node.get_content() for n in retriever.retrieve(q)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("system", choices=["langchain", "llamaindex"])
    parser.add_argument("--model", required=True)
    parser.add_argument("--questions", required=True, help="JSON Lines: id and question of each")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    start = time.perf_counter()
    chunks, retrieve = (langchain if args.system == "langchain" else llamaindex)(
        args.model, [Path(f) for f in args.files])
    build_s = time.perf_counter() - start
    passages, query_ms = {}, []
    for line in Path(args.questions).read_text(encoding="utf-8").splitlines():
        if line.strip():
            q = json.loads(line)
            t = time.perf_counter()
            passages[q["id"]] = retrieve(q["question"])
            query_ms.append((time.perf_counter() - t) * 1000)
    print(json.dumps({"passages": passages, "chunks": chunks, "build_s": build_s, "query_ms": query_ms}))


if __name__ == "__main__":
    main()

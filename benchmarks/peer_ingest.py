"""One ingestion by a peer (LangChain or LlamaIndex), run by benchmarks/compare_peers.py in .venv-peers.

Each call is a fresh process, as a user's run would be: imports, model load and loading the files are
all inside the time measured by the caller. Prints one JSON object: chunks written, model load seconds.

    .venv-peers/bin/python benchmarks/peer_ingest.py langchain --url URL --namespace NS --model DIR FILE...
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def read_text(path: Path) -> list[tuple[str, dict]]:
    """The file's text as LangChain's usual loaders give it: a PDF per page (pypdf), HTML as its text (bs4)."""
    if path.suffix == ".pdf":
        from pypdf import PdfReader

        return [((page.extract_text() or "").replace("\x00", ""), {"source": str(path), "page": n})
                for n, page in enumerate(PdfReader(path).pages, start=1)]
    raw = path.read_bytes().decode("utf-8", errors="replace")
    if path.suffix in (".html", ".htm"):
        from bs4 import BeautifulSoup

        raw = BeautifulSoup(raw, "html.parser").get_text("\n")
    return [(raw.replace("\x00", ""), {"source": str(path)})]  # Postgres text cannot hold NUL


def langchain(args: argparse.Namespace) -> dict:
    from langchain_classic.indexes import SQLRecordManager
    from langchain_core.documents import Document
    from langchain_core.indexing import index
    from langchain_huggingface import HuggingFaceEmbeddings
    from langchain_postgres import PGVector
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    start = time.perf_counter()
    embeddings = HuggingFaceEmbeddings(model_name=args.model, model_kwargs={"device": "cpu"},
                                       encode_kwargs={"normalize_embeddings": True, "batch_size": 32})
    embeddings.embed_query("load")
    model_s = time.perf_counter() - start
    url = args.url.replace("postgresql://", "postgresql+psycopg://", 1)
    store = PGVector(embeddings=embeddings, collection_name=args.namespace, connection=url, use_jsonb=True)
    records = SQLRecordManager(f"pgvector/{args.namespace}", db_url=url)
    records.create_schema()
    docs = [Document(page_content=text, metadata=meta) for f in args.files for text, meta in read_text(Path(f))]
    chunks = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=100).split_documents(docs)
    result = index(chunks, records, store, cleanup="incremental", source_id_key="source", batch_size=100)
    return {"chunks": len(chunks), "model_load_s": model_s, **{k: v for k, v in result.items()}}


def llamaindex(args: argparse.Namespace) -> dict:
    from llama_index.core import SimpleDirectoryReader
    from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.storage.docstore import SimpleDocumentStore
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.vector_stores.postgres import PGVectorStore

    start = time.perf_counter()
    embed = HuggingFaceEmbedding(model_name=args.model, device="cpu", embed_batch_size=32, normalize=True)
    embed.get_text_embedding("load")
    model_s = time.perf_counter() - start
    base, _, query = args.url.partition("?")
    sync_url = base.replace("postgresql://", "postgresql+psycopg2://", 1) + "?" + query
    async_url = base.replace("postgresql://", "postgresql+asyncpg://", 1) + "?" + query
    store = PGVectorStore(connection_string=sync_url, async_connection_string=async_url, table_name=args.namespace,
                          embed_dim=384)
    persist = Path(args.state_dir) / args.namespace
    # llamaindex-200: chunks the 256-token model reads whole (its default 1024-token chunks are truncated);
    # chunk_overlap 20, as its default overlap of 200 must be smaller than the chunk
    splitter = SentenceSplitter(chunk_size=200, chunk_overlap=20) if args.system == "llamaindex-200" \
        else SentenceSplitter()
    pipeline = IngestionPipeline(transformations=[splitter, embed], vector_store=store,
                                 docstore=SimpleDocumentStore(), docstore_strategy=DocstoreStrategy.UPSERTS)
    if persist.exists():
        pipeline.load(str(persist))
    docs = SimpleDirectoryReader(input_files=args.files, filename_as_id=True).load_data()
    for doc in docs:  # Postgres text cannot hold NUL
        doc.set_content(doc.text.replace("\x00", ""))
    nodes = pipeline.run(documents=docs)
    pipeline.persist(str(persist))
    return {"chunks": len(nodes), "model_load_s": model_s}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("system", choices=["langchain", "llamaindex", "llamaindex-200"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--state-dir", default="/tmp")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    print(json.dumps((langchain if args.system == "langchain" else llamaindex)(args)))


if __name__ == "__main__":
    main()

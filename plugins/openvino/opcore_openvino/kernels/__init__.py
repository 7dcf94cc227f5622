"""OpenVINO builders per op family; each module-level kernel function serves one op."""

"""The pipeline steps (ingest, improve, audit, ...): each reads the files named as its input and writes its outputs
atomically, so a killed step leaves either the old outputs or the new ones, never half a file."""

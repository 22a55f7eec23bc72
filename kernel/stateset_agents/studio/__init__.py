"""The terminal studio (`stateset-agents studio [WORKSPACE]`, docs/studio.md): a face over the pipeline, plan and
provider code the CLI runs. `actions` and `feed` hold the calls (no Textual); `app` and `panes` the Textual screens,
imported only when the studio starts (`pip install 'stateset-agents[studio]'`)."""

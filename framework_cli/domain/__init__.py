"""The domain: the seven kinds as operations, deletion plans, identities and bindings, runs and their snapshots."""

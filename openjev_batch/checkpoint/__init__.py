"""What a checkpoint is, read from its files without loading it: its kind from config.json (`info`), a
classifier's architecture and labels (`classifier`), its weight files and content fingerprint (`weights`), and
what it may do when it loads (`trust`). Below the readouts and the backends, which both ask."""

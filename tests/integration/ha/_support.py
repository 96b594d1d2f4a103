"""Settings shared by the replication tests."""

# 64 KiB commitlog files: a few hundred messages fill several, and their blank tails replicate too
SMALL_FILES = "mapedFileSizeCommitLog=65536\nmaxMessageSize=8192\n"

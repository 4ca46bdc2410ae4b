"""Read and write RocketMQ store files (CommitLog, ConsumeQueue, ConsumeQueueExt, configs) byte-exact."""

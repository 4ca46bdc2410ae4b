"""Job 1's rules, pure data: consume-queue units and bitmaps from decoded batches (`dispatch`), the registry they
are dispatched with (`dumpregistry`), each file's verdict (`dumpfiles`), the broker's files written back
(`export`) and the dump's own queues compared with the rebuild (`verify`)."""

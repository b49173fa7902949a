package org.pipeforge;

/**
 * Serves micro-batches to {@link Trainer#stepFromLoader()}, on the thread that calls it.
 * {@code position} counts micro-batches: 0, 1, 2, ... across steps. An exception thrown here fails
 * the step with a {@link PipeForgeException} (CALLBACK_ERROR) whose message holds the exception's
 * class and message and whose cause is the exception; the trainer is unchanged.
 */
public interface DataLoader {
  /** Micro-batch number {@code position}; the runtime copies the tensors. */
  Batch next(long position) throws Exception;

  /** The next call to {@link #next} will ask for {@code position} (after a failed step or a load). */
  default void seek(long position) throws Exception {}
}

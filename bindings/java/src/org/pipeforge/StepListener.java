package org.pipeforge;

/**
 * Watches {@link Trainer#run(RunOptions, StepListener)}: called after every step but the last, on
 * the thread that called run. Returning true ends the run after that step as if it were the last
 * (the checkpoint directory gets its checkpoint) and {@link RunResult#getStopped()} says so. An
 * exception thrown here does the same, and run throws it afterwards.
 */
@FunctionalInterface
public interface StepListener {
  boolean onStep(StepInfo info) throws Exception;
}

package org.pipeforge;

/**
 * Adapts a {@link StepListener} to the native callback (a SWIG director), and stops the run when
 * the JVM is shutting down (Ctrl-C, SIGTERM). Never lets an exception out to native code: it keeps
 * it for {@link Trainer#run(RunOptions, StepListener)} to throw.
 */
final class StepBridge extends StepCallback {
  private final StepListener listener;
  volatile boolean stopRequested;
  Throwable error;

  StepBridge(StepListener listener) {
    this.listener = listener;
  }

  @Override
  public boolean onStep(StepInfo info) {
    if (stopRequested) return true;
    if (listener == null) return false;
    try {
      return listener.onStep(info);
    } catch (Throwable t) {
      error = t;
      return true;
    }
  }
}

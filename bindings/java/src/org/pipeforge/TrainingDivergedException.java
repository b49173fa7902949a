package org.pipeforge;

/**
 * Thrown by {@link Trainer#run(RunOptions, StepListener)} when a step diverged (its loss, gradient
 * norm or a parameter after the update was NaN or infinite): the run ended there and no checkpoint
 * was written for that step. {@link #getResult()} is the run up to it; its getDivergence() says why.
 */
public class TrainingDivergedException extends ArithmeticException {
  private final transient RunResult result;

  public TrainingDivergedException(RunResult result) {
    super("training diverged at step " + result.getStep() + ": " + result.getDivergence()
        + " (no checkpoint was written for it; try a smaller lr or clip norm)");
    this.result = result;
  }

  public RunResult getResult() {
    return result;
  }
}

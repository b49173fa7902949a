package org.pipeforge;

/** One micro-batch: inputs and targets. */
public final class Batch {
  private final Tensor inputs;
  private final Tensor targets;

  public Batch(Tensor inputs, Tensor targets) {
    this.inputs = inputs;
    this.targets = targets;
  }

  public Tensor inputs() {
    return inputs;
  }

  public Tensor targets() {
    return targets;
  }
}

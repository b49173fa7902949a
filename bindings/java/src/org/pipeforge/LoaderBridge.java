package org.pipeforge;

/**
 * Adapts a {@link DataLoader} to the native callback (a SWIG director). Never lets an exception out
 * to native code: it keeps it for {@link Trainer#stepFromLoader()} and returns its text.
 */
final class LoaderBridge extends LoaderCallback {
  private final DataLoader loader;
  Throwable lastError;

  LoaderBridge(DataLoader loader) {
    this.loader = loader;
  }

  @Override
  public String next(long position, MicroBatch batch) {
    try {
      Batch b = loader.next(position);
      if (b == null || b.inputs() == null || b.targets() == null) {
        return "the data loader returned no batch (or a null tensor) for position " + position;
      }
      batch.setInputs(b.inputs());
      batch.setTargets(b.targets());
      return "";
    } catch (Throwable t) {
      return failed(t);
    }
  }

  @Override
  public String seek(long position) {
    try {
      loader.seek(position);
      return "";
    } catch (Throwable t) {
      return failed(t);
    }
  }

  private String failed(Throwable t) {
    lastError = t;
    return t.toString();
  }
}

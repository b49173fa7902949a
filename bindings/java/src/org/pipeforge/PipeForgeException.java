package org.pipeforge;

/**
 * An error from the PipeForge runtime: its code (a {@code pf_code} value, e.g. 1 for
 * INVALID_ARGUMENT), the code's name and the runtime's message. Unchecked, like the
 * IllegalArgumentException it usually stands for.
 */
public class PipeForgeException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public static final int INVALID_ARGUMENT = 1;
  public static final int FAILED_PRECONDITION = 2;
  public static final int OUT_OF_MEMORY = 3;
  public static final int NOT_FOUND = 4;
  public static final int IO_ERROR = 5;
  public static final int DATA_LOSS = 6;
  public static final int CALLBACK_ERROR = 11;
  public static final int UNIMPLEMENTED = 14;
  public static final int INTERNAL = 15;

  private final int code;
  private final String codeName;

  public PipeForgeException(int code, String codeName, String message) {
    super(message);
    this.code = code;
    this.codeName = codeName;
  }

  /** The pf_code value. */
  public int getCode() {
    return code;
  }

  /** The code's name, e.g. "INVALID_ARGUMENT". */
  public String getCodeName() {
    return codeName;
  }

  @Override
  public String toString() {
    return "PipeForgeException[" + codeName + "]: " + getMessage();
  }
}

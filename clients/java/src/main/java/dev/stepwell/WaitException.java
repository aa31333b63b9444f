package dev.stepwell;

import dev.stepwell.v1.Wait;
import io.grpc.Status;
import java.util.List;
import java.util.Map;

/**
 * A failure that names a wait as it stands: settled by another call ({@link
 * WaitSettledException}), expired ({@link WaitExpiredException}), cancelled ({@link
 * WaitCancelledException}), or still pending when the caller stopped waiting ({@link
 * WaitTimeoutException}). {@link #getWait()} is that wait (the name is not {@code wait()}, which
 * {@link Object} owns).
 */
public class WaitException extends StepwellException {
  private final Wait theWait;

  public WaitException(
      Status.Code code,
      String message,
      String reason,
      String field,
      Map<String, String> metadata,
      List<FieldViolation> violations,
      Throwable cause,
      Wait wait) {
    super(code, message, reason, field, metadata, violations, cause);
    this.theWait = wait == null ? Wait.getDefaultInstance() : wait;
  }

  /** The wait as this failure saw it. */
  public Wait getWait() {
    return theWait;
  }

  /** "turn/name" of the wait, for messages. */
  static String describe(Wait w) {
    return "wait " + w.getTurnId() + "/" + w.getName();
  }
}

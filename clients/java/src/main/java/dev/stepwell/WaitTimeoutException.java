package dev.stepwell;

import dev.stepwell.v1.Wait;
import io.grpc.Status;
import java.util.List;
import java.util.Map;

/**
 * The caller's timeout passed with the wait still PENDING; the wait is unchanged, and a later call
 * waits for it again. Thrown by {@link StepwellClient#waitForSignal}; code DEADLINE_EXCEEDED,
 * reason {@code WAIT_PENDING} (the client's own, not the sidecar's). {@link #getWait()} is the
 * wait as last read: only its namespace, turn and name when the sidecar never answered (it was
 * unreachable or stalled until the timeout), the last failure then being the cause.
 */
public class WaitTimeoutException extends WaitException {
  public WaitTimeoutException(
      Status.Code code,
      String message,
      String reason,
      String field,
      Map<String, String> metadata,
      List<FieldViolation> violations,
      Throwable cause,
      Wait wait) {
    super(code, message, reason, field, metadata, violations, cause, wait);
  }
}

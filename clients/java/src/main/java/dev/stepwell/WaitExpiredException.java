package dev.stepwell;

import dev.stepwell.v1.Wait;
import io.grpc.Status;
import java.util.List;
import java.util.Map;

/**
 * The wait was settled EXPIRED: its {@code expire_at} passed with nothing settling it before.
 * Thrown by {@link StepwellClient#waitForSignal} and {@link StepwellClient#sleepUntil}; code
 * FAILED_PRECONDITION, reason {@code WAIT_EXPIRED} (the client's own, not the sidecar's). {@link
 * #getWait()} is the wait as last read.
 */
public class WaitExpiredException extends WaitException {
  public WaitExpiredException(
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

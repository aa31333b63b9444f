package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;

/** Thrown by {@code once()} when another holder kept the key past the wait timeout. */
public class OnceTimeoutException extends StepwellException {
  public OnceTimeoutException(
      Status.Code code,
      String message,
      String reason,
      String field,
      Map<String, String> metadata,
      List<FieldViolation> violations,
      Throwable cause) {
    super(code, message, reason, field, metadata, violations, cause);
  }
}

package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;

/** Thrown by {@code once()} when the key's record is FAILED (a permanent release). */
public class OperationFailedException extends StepwellException {
  public OperationFailedException(
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

package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;

/** FAILED_PRECONDITION / NOT_ACQUIRED: the key is not held. */
public class NotAcquiredException extends StepwellException {
  public NotAcquiredException(
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

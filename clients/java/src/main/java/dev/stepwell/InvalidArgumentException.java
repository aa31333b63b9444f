package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;

/** INVALID_ARGUMENT (any reason); {@link #field()} names the offending field. */
public class InvalidArgumentException extends StepwellException {
  public InvalidArgumentException(
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

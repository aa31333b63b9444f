package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;

/** ALREADY_EXISTS / RESULT_MISMATCH: Complete repeated with another result. */
public class ResultMismatchException extends StepwellException {
  public ResultMismatchException(
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

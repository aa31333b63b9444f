package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;

/** FAILED_PRECONDITION / WORKFLOW_VERSION_MISMATCH on Restore; both versions are in the metadata. */
public class WorkflowVersionMismatchException extends StepwellException {
  public WorkflowVersionMismatchException(
      Status.Code code,
      String message,
      String reason,
      String field,
      Map<String, String> metadata,
      List<FieldViolation> violations,
      Throwable cause) {
    super(code, message, reason, field, metadata, violations, cause);
  }

  /** The version the caller expected. */
  public String expectedVersion() {
    return metadata().getOrDefault("expected_version", "");
  }

  /** The version the turn recorded. */
  public String recordedVersion() {
    return metadata().getOrDefault("recorded_version", "");
  }
}
